//! Idle HTTP/1.1 connections parked outside hyper.
//!
//! hyper keeps, for each connection, an 8 KiB read buffer, an 8 KiB write buffer, the
//! last response's `HeaderMap` and its connection state for as long as the connection
//! lives, idle or not (docs/benchmarks.md, "idle connections parked outside hyper").
//! A connection that stays idle for [`PARK_AFTER`] is therefore ended inside hyper and
//! kept as its bare socket: [`Parking`], the IO hyper is given, answers hyper's next
//! read with an end of stream, which hyper takes for a client that closed between
//! requests and ends with `Ok`, its socket untouched. The socket then waits in the
//! listener's [`Lot`], out of the runtime, until it is readable, and gets a new task
//! and a new hyper connection.
//!
//! The end of stream is a lie to hyper, safe only when hyper holds nothing of the
//! client's and owes it nothing. [`Parking`] tells it so only when ALL of these hold:
//! - every request hyper handed to the service has its response body dropped by hyper
//!   (written whole, or abandoned): counted by [`Exchanges`] and [`Answer`];
//! - the last request had no body (a body may still be in hyper's buffer or being
//!   drained from the socket), and no request on this connection asked for an upgrade
//!   (the upgraded stream reads through this IO);
//! - the last four bytes handed to hyper are `\r\n\r\n`, the end of a head: hyper's
//!   read buffer then holds no part of a next request (a partial head never ends with
//!   an empty line; whole heads hyper parses before it reads again, and lone empty
//!   lines it discards). Should it hold bytes anyway, they come back in hyper's
//!   `Parts::read_buf` and are replayed into the next hyper connection, never dropped;
//! - hyper's write buffer is empty: no write since the last successful flush (hyper
//!   flushes its IO only after writing out its own buffer, and moves to idle right
//!   after that flush);
//! - the socket has nothing to read (the read below returned `Pending`), and it has
//!   been so for [`PARK_AFTER`] since the exchange ended. Bytes that arrive after that
//!   stay in the socket for the next hyper connection.
//!
//! Parking only where it is cheap: plain TCP. A TLS connection keeps hyper (rustls
//! holds its own buffers; whether it holds plaintext cannot be asked of the socket).

use std::collections::BTreeSet;
use std::future::Future as _;
use std::io;
use std::os::fd::{AsFd as _, AsRawFd, BorrowedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body::{Body as HttpBody, Frame, SizeHint};
use mio::unix::SourceFd;
use prometheus_client::metrics::{counter::Counter, gauge::Gauge};
use slab::Slab;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Notify};
use tokio::time::{Instant, Sleep};

use crate::body::{Body, BoxError};
use crate::metrics::Metrics;

/// How long a connection stays in hyper after its last exchange. Short enough that a
/// burst of new connections reuses the buffers of those parked before it; long enough
/// that a client sending request after request (a page's subresources, a benchmark)
/// never waits for a new hyper connection.
pub const PARK_AFTER: Duration = Duration::from_millis(100);

/// A transport hyper serves HTTP/1.1 on, and whether and how it parks.
pub trait Transport: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Whether connections on this transport are parked.
    const PARKS: bool;
    /// The bare socket, out of the runtime's reactor, for the [`Lot`]; `None` when the
    /// transport cannot be parked (or leaving the reactor failed): the connection is
    /// then closed.
    fn into_socket(self) -> Option<std::net::TcpStream>;
    /// Whether [`Transport::poll_send_file`] works: bytes reach the socket as they
    /// are (not over TLS, which encrypts every byte in user space).
    const SENDS_FILES: bool = false;
    /// Writes `head`, then `len` bytes of `file` from `offset` without copying them
    /// through user space; the count written, as `poll_write_vectored` counts.
    fn poll_send_file(
        &mut self,
        _cx: &mut Context<'_>,
        _head: &[io::IoSlice<'_>],
        _file: BorrowedFd<'_>,
        _offset: u64,
        _len: usize,
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }
}

impl Transport for tokio::net::TcpStream {
    const PARKS: bool = true;
    fn into_socket(self) -> Option<std::net::TcpStream> {
        self.into_std()
            .inspect_err(|e| tracing::debug!(error = %e, "a connection could not be parked"))
            .ok()
    }
    const SENDS_FILES: bool = true;
    fn poll_send_file(
        &mut self,
        cx: &mut Context<'_>,
        head: &[io::IoSlice<'_>],
        file: BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.poll_write_ready(cx))?;
            let socket = self.as_fd();
            match self.try_io(tokio::io::Interest::WRITABLE, || {
                send_head_and_file(socket, head, file, offset, len)
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                result => return Poll::Ready(result),
            }
        }
    }
}

impl Transport for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    const PARKS: bool = false;
    fn into_socket(self) -> Option<std::net::TcpStream> {
        None
    }
}

/// Set once `sendfile` has refused a store file as a source (a file system without
/// it): large bodies are then written from memory like the rest.
static SENDFILE_REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether `sendfile` failed for its source rather than the socket (`EINVAL`,
/// `ENOSYS`, `EOPNOTSUPP`, `ESPIPE`): the connection is fine, the bytes can be copied
/// instead.
fn refuses_sendfile(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | libc::ESPIPE)
    )
}

/// One attempt: `head` with `MSG_MORE` (it leaves in the body's first segment), then
/// the file's bytes by `sendfile`. Returns what was written; an error only when
/// nothing was (a failed `sendfile` after the head is reported by the next call).
#[allow(unsafe_code)] // std has no sendmsg flags or sendfile
fn send_head_and_file(
    socket: BorrowedFd<'_>,
    head: &[io::IoSlice<'_>],
    file: BorrowedFd<'_>,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let head_len: usize = head.iter().map(|b| b.len()).sum();
    let mut written = 0;
    if head_len > 0 {
        // SAFETY: a zeroed msghdr is valid; its iovecs point at `head`, alive for the
        // call (`IoSlice` is ABI-compatible with `iovec`).
        let sent = unsafe {
            let mut message: libc::msghdr = std::mem::zeroed();
            message.msg_iov = head.as_ptr().cast_mut().cast();
            message.msg_iovlen = head.len() as _;
            libc::sendmsg(
                socket.as_raw_fd(),
                &message,
                libc::MSG_MORE | libc::MSG_NOSIGNAL,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        written = sent as usize;
        if written < head_len {
            return Ok(written);
        }
    }
    let mut file_offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: both descriptors are open for the call; the offset is ours to update.
    let sent =
        unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut file_offset, len) };
    if sent < 0 {
        let error = io::Error::last_os_error();
        return if written > 0 { Ok(written) } else { Err(error) };
    }
    Ok(written + sent as usize)
}

/// Requests handed to the service and responses hyper is done with, for one hyper
/// connection.
#[derive(Default)]
pub struct Exchanges {
    started: AtomicU32,
    answered: AtomicU32,
    /// [`BODY`] and [`UPGRADE`] bits.
    flags: AtomicU8,
}

/// The last request has a body.
const BODY: u8 = 1;
/// A request asked for an upgrade (kept for the connection's life).
const UPGRADE: u8 = 2;

impl Exchanges {
    /// Counts a request hyper hands to the service; the returned [`Answer`] goes with
    /// its response body.
    pub fn start<B: HttpBody>(self: &Arc<Self>, req: &Request<B>) -> Answer {
        let upgrade = req.method() == http::Method::CONNECT
            || req.headers().contains_key(http::header::UPGRADE);
        let flags = (self.flags.load(Ordering::Relaxed) & UPGRADE)
            | if upgrade { UPGRADE } else { 0 }
            | if req.body().is_end_stream() { 0 } else { BODY };
        self.flags.store(flags, Ordering::Relaxed);
        self.started.fetch_add(1, Ordering::Relaxed);
        Answer(self.clone())
    }

    fn all_answered_without_bodies(&self) -> bool {
        // The service and the bodies run in the connection's own task, as does the
        // IO that asks: the counts cannot move under this check.
        self.flags.load(Ordering::Relaxed) == 0
            && self.started.load(Ordering::Relaxed) == self.answered.load(Ordering::Relaxed)
    }
}

/// Held by a response body: dropping it (hyper is done with the body) counts the
/// exchange answered.
pub struct Answer(Arc<Exchanges>);

impl Drop for Answer {
    fn drop(&mut self) {
        self.0.answered.fetch_add(1, Ordering::Relaxed);
    }
}

/// A response body that tells [`Exchanges`] when hyper drops it.
pub struct Answered {
    body: Body,
    _answer: Answer,
}

impl Answered {
    pub fn new(body: Body, answer: Answer) -> Self {
        Answered {
            body,
            _answer: answer,
        }
    }
}

impl HttpBody for Answered {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

const END_OF_HEAD: u32 = u32::from_be_bytes(*b"\r\n\r\n");

/// The IO hyper serves an HTTP/1.1 connection on: it ends the connection, by an end
/// of stream, once it is idle (see the module's rules).
pub struct Parking<I> {
    inner: I,
    /// Bytes hyper had read ahead when it last ended, read again first.
    read_ahead: Bytes,
    exchanges: Arc<Exchanges>,
    /// `None`: never parks (the transport cannot).
    park_after: Option<Duration>,
    /// The last four bytes handed to hyper.
    tail: u32,
    /// Written since the last successful flush.
    unflushed: bool,
    /// Since when the connection has been idle, if it is.
    idle_since: Option<Instant>,
    /// Wakes hyper to read once the connection has been idle for `park_after`;
    /// made on the first idle period.
    quiet: Option<Pin<Box<Sleep>>>,
    /// The end of stream was given: hyper must see nothing else of the socket.
    parked: bool,
}

impl<I: Transport> Parking<I> {
    pub fn new(inner: I, read_ahead: Bytes, exchanges: Arc<Exchanges>) -> Self {
        Parking {
            inner,
            read_ahead,
            exchanges,
            park_after: I::PARKS.then_some(PARK_AFTER),
            tail: 0,
            unflushed: false,
            idle_since: None,
            quiet: None,
            parked: false,
        }
    }

    /// After hyper's connection ended: the transport and since when it has been idle,
    /// if it ended because this IO parked it; `None` when it ended for good.
    pub fn into_parked(self) -> Option<(I, Instant)> {
        match (self.parked, self.idle_since) {
            (true, Some(since)) => Some((self.inner, since)),
            _ => None,
        }
    }

    fn idle(&self) -> bool {
        self.park_after.is_some()
            && self.tail == END_OF_HEAD
            && !self.unflushed
            && self.exchanges.all_answered_without_bodies()
    }

    /// Whether the connection has now been idle for `park_after`; if not, the task is
    /// woken when it will have been.
    fn poll_quiet(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(park_after) = self.park_after else {
            return false;
        };
        let deadline = *self.idle_since.get_or_insert_with(Instant::now) + park_after;
        let quiet = self
            .quiet
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if quiet.deadline() != deadline {
            quiet.as_mut().reset(deadline);
        }
        quiet.as_mut().poll(cx).is_ready()
    }
}

impl<I> Parking<I> {
    fn handed(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.idle_since = None;
        for &b in &bytes[bytes.len().saturating_sub(4)..] {
            self.tail = (self.tail << 8) | u32::from(b);
        }
    }

    fn active(&mut self) {
        self.idle_since = None;
        self.unflushed = true;
    }
}

impl<I: Transport> AsyncRead for Parking<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.parked {
            return Poll::Ready(Ok(()));
        }
        if !this.read_ahead.is_empty() {
            let n = this.read_ahead.len().min(buf.remaining());
            let bytes = this.read_ahead.split_to(n);
            buf.put_slice(&bytes);
            this.handed(&bytes);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.handed(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.idle() && this.poll_quiet(cx) => {
                this.parked = true;
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<I: Transport> AsyncWrite for Parking<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.active();
        Pin::new(&mut self.inner).poll_write(cx, data)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.active();
        // A body in one of the store's files goes by `sendfile`, with what hyper queued
        // before it (the head); what follows it goes on the next call.
        if I::SENDS_FILES && !SENDFILE_REFUSED.load(Ordering::Relaxed) {
            let in_file = bufs.iter().enumerate().find_map(|(i, buf)| {
                let found = (buf.len() >= store::sendable::MIN_SENDABLE)
                    .then(|| store::sendable::file_of(buf))??;
                Some((i, found))
            });
            if let Some((i, (file, offset))) = in_file {
                match self
                    .inner
                    .poll_send_file(cx, &bufs[..i], file, offset, bufs[i].len())
                {
                    // Nothing was written: the store's file system cannot be sent
                    // from. The bytes are in memory all the same; copy them, from now on.
                    Poll::Ready(Err(e)) if refuses_sendfile(&e) => {
                        if !SENDFILE_REFUSED.swap(true, Ordering::Relaxed) {
                            tracing::warn!(error = %e, "sendfile refused the store's files; large bodies are copied instead");
                        }
                    }
                    sent => return sent,
                }
            }
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let flushed = Pin::new(&mut this.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = flushed {
            this.unflushed = false;
            // The exchange may have just ended: start the quiet period now, so that
            // hyper is woken to read at its end even if it does not read before.
            if this.idle() && this.poll_quiet(cx) {
                cx.waker().wake_by_ref();
            }
        }
        flushed
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.parked {
            // hyper ends a connection it saw end by shutting it down: the parked
            // socket stays open.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The parked connections of one listener: bare sockets taken out of the runtime's
/// reactor and kept, with what serving them again needs (`T`), in an epoll set of the
/// lot's own that one task watches ([`Lot::watch`]). A parked connection then costs a
/// descriptor and ~250 bytes of heap: no task, no timer, no reactor registration
/// (those were ~900 bytes more per connection, docs/benchmarks.md, "Idle
/// connections").
pub struct Lot<T> {
    registry: mio::Registry,
    spots: Mutex<Spots<T>>,
    /// Wakes the watcher when a spot's deadline comes before all others.
    earlier: Notify,
    parked_now: Gauge,
    parks: Counter,
    closed_for_room: Counter,
}

/// The lot's epoll set, registered with the runtime's reactor, for its watcher.
pub struct LotEvents(AsyncFd<mio::Poll>);

struct Spots<T> {
    open: Slab<Spot<T>>,
    /// Each open spot by (idle deadline, slab key).
    by_deadline: BTreeSet<(Instant, usize)>,
    /// Told apart from a spot that had the same slab key before it (an event read in
    /// the same batch as a park may name either).
    generation: u32,
    /// The server stopped: no more parking.
    closed: bool,
}

struct Spot<T> {
    socket: std::net::TcpStream,
    deadline: Instant,
    generation: u32,
    with: T,
}

impl<T> Lot<T> {
    /// A lot, and the epoll set its watcher waits on. Within the runtime.
    pub fn new(metrics: &Metrics) -> io::Result<(Self, LotEvents)> {
        let poll = mio::Poll::new()?;
        let registry = poll.registry().try_clone()?;
        #[allow(unsafe_code, reason = "tokio's AsyncFd takes a descriptor on trust")]
        // SAFETY: the `mio::Poll` owns its epoll descriptor and is moved into the
        // `AsyncFd`, which closes it only when dropped.
        let events =
            unsafe { AsyncFd::register_with_interest(poll, tokio::io::Interest::READABLE)? };
        let lot = Lot {
            registry,
            spots: Mutex::new(Spots {
                open: Slab::new(),
                by_deadline: BTreeSet::new(),
                generation: 0,
                closed: false,
            }),
            earlier: Notify::new(),
            parked_now: metrics.connections_parked.clone(),
            parks: metrics.connection_parks.clone(),
            closed_for_room: metrics.parked_closed_for_room.clone(),
        };
        Ok((lot, LotEvents(events)))
    }

    fn spots(&self) -> MutexGuard<'_, Spots<T>> {
        self.spots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parks the connection on `socket` until `deadline`, when it is closed unless its
    /// client sent something first. Once the server stops, or when the socket cannot be
    /// watched, the connection is closed at once.
    pub fn park(&self, socket: std::net::TcpStream, deadline: Instant, with: T) {
        let mut spots = self.spots();
        if spots.closed {
            return;
        }
        spots.generation = spots.generation.wrapping_add(1);
        let generation = spots.generation;
        let key = spots.open.vacant_key();
        let registered = self.registry.register(
            &mut SourceFd(&socket.as_raw_fd()),
            token(key, generation),
            mio::Interest::READABLE,
        );
        if let Err(e) = registered {
            return tracing::debug!(error = %e, "a parked connection could not be watched; closed");
        }
        spots.open.insert(Spot {
            socket,
            deadline,
            generation,
            with,
        });
        let earliest = spots
            .by_deadline
            .first()
            .is_none_or(|&(first, _)| deadline < first);
        spots.by_deadline.insert((deadline, key));
        self.parks.inc();
        self.parked_now.set(spots.open.len() as i64);
        drop(spots);
        if earliest {
            self.earlier.notify_one();
        }
    }

    /// Hands each parked connection whose client sent something (or closed) to
    /// `unpark`, closes each one whose deadline passed, and all of them once `stop`
    /// turns true; runs until then.
    pub async fn watch(
        &self,
        events: LotEvents,
        mut stop: watch::Receiver<bool>,
        mut unpark: impl FnMut(std::net::TcpStream, T),
    ) {
        let mut stopping = std::pin::pin!(stop.wait_for(|&stopping| stopping));
        let LotEvents(mut ready) = events;
        let mut batch = mio::Events::with_capacity(256);
        loop {
            let next = self.spots().by_deadline.first().map(|&(due, _)| due);
            // Without one, an hour: any park before then wakes this (`earlier`).
            let due = next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                guard = ready.readable_mut() => {
                    let Ok(mut guard) = guard else { break };
                    let polled = guard.try_io(|poll| {
                        poll.get_mut().poll(&mut batch, Some(Duration::ZERO))?;
                        if batch.is_empty() {
                            return Err(io::ErrorKind::WouldBlock.into());
                        }
                        Ok(())
                    });
                    match polled {
                        // None left: readiness cleared, wait for more.
                        Err(_would_block) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "reading parked connections' events");
                            break;
                        }
                        Ok(Ok(())) => {
                            for event in &batch {
                                if let Some((socket, with)) = self.leave(event.token()) {
                                    unpark(socket, with);
                                }
                            }
                        }
                    }
                }
                () = tokio::time::sleep_until(due) => self.close_due(Instant::now()),
                () = self.earlier.notified() => {}
                _ = stopping.as_mut() => break,
            }
        }
        // Stopped (or, should epoll fail, unwatchable): every parked connection closes
        // now, and none parks again.
        let mut spots = self.spots();
        spots.closed = true;
        spots.by_deadline.clear();
        spots.open.clear();
        self.parked_now.set(0);
    }

    /// Takes the spot an event names out of the lot, if it is still there.
    fn leave(&self, token: mio::Token) -> Option<(std::net::TcpStream, T)> {
        let (key, generation) = (token.0 & KEY_MASK, (token.0 >> KEY_BITS) as u32);
        let mut spots = self.spots();
        if spots.open.get(key)?.generation != generation {
            return None;
        }
        let spot = spots.open.remove(key);
        spots.by_deadline.remove(&(spot.deadline, key));
        self.parked_now.set(spots.open.len() as i64);
        drop(spots);
        // Leaving the set before the runtime's reactor takes the socket; should this
        // fail, the set's events for it are for a key no longer open.
        let _ = self
            .registry
            .deregister(&mut SourceFd(&spot.socket.as_raw_fd()));
        Some((spot.socket, spot.with))
    }

    /// Closes some parked connections to free their places for a new client, as
    /// nginx drains reusable connections: an eighth of those parked, at least one
    /// and at most [`MOST_CLOSED_FOR_ROOM`], those whose idle deadline comes first
    /// (parked longest, under one header timeout). RFC 9112 §9.5 lets a server close
    /// an idle connection at any time; its client opens a new one. One whose client
    /// already sent its next request (bytes waiting) is about to be served and is
    /// left. Returns how many were closed.
    pub fn make_room(&self) -> usize {
        let mut spots = self.spots();
        let wanted = (spots.open.len() / 8).clamp(1, MOST_CLOSED_FOR_ROOM);
        let (mut closing, mut busy) = (Vec::new(), Vec::new());
        while closing.len() < wanted {
            let Some((due, key)) = spots.by_deadline.pop_first() else {
                break;
            };
            if has_bytes_waiting(&spots.open[key].socket) {
                busy.push((due, key));
            } else {
                closing.push(spots.open.remove(key));
            }
        }
        spots.by_deadline.extend(busy);
        self.parked_now.set(spots.open.len() as i64);
        drop(spots);
        let closed = closing.len();
        // Closed outside the lock, which connection threads take to park.
        drop(closing);
        self.closed_for_room.inc_by(closed as u64);
        closed
    }

    fn close_due(&self, now: Instant) {
        let mut spots = self.spots();
        while let Some(&(due, key)) = spots.by_deadline.first() {
            if due > now {
                break;
            }
            spots.by_deadline.pop_first();
            // Closing the socket takes it out of the epoll set too.
            drop(spots.open.remove(key));
        }
        self.parked_now.set(spots.open.len() as i64);
    }
}

/// The most parked connections [`Lot::make_room`] closes at once (nginx's bound).
const MOST_CLOSED_FOR_ROOM: usize = 32;

/// Whether bytes (a next request) wait unread on a parked, non-blocking `socket`.
fn has_bytes_waiting(socket: &std::net::TcpStream) -> bool {
    matches!(socket.peek(&mut [0; 1]), Ok(1..))
}

const KEY_BITS: u32 = 32;
const KEY_MASK: usize = (1 << KEY_BITS) - 1;

fn token(key: usize, generation: u32) -> mio::Token {
    mio::Token((generation as usize) << KEY_BITS | (key & KEY_MASK))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    /// A connected pair on loopback: the client's end, and the server's as a parked
    /// connection holds it (non-blocking).
    fn connected() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, server)
    }

    #[test]
    fn a_source_sendfile_refuses_is_reported_after_the_head_and_not_with_it() {
        let (mut client, server) = connected();
        // A directory cannot be a `sendfile` source.
        let source = std::fs::File::open(std::env::temp_dir()).unwrap();
        let head = [io::IoSlice::new(b"HTTP/1.1 200 OK\r\n\r\n")];
        let sent = send_head_and_file(server.as_fd(), &head, source.as_fd(), 0, 100);
        assert_eq!(
            sent.unwrap(),
            head[0].len(),
            "the head is reported as written"
        );
        let error = send_head_and_file(server.as_fd(), &[], source.as_fd(), 0, 100).unwrap_err();
        assert!(refuses_sendfile(&error), "{error}");
        let mut read = vec![0; head[0].len()];
        client.read_exact(&mut read).unwrap();
        assert_eq!(&read[..], &head[0][..]);
    }

    /// Whether the server closed: the client reads its end (blocking, bounded).
    fn closed_by_server(client: &mut std::net::TcpStream) -> bool {
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        matches!(client.read(&mut [0; 8]), Ok(0))
    }

    struct Watched {
        lot: Arc<Lot<u32>>,
        unparked: tokio::sync::mpsc::UnboundedReceiver<(std::net::TcpStream, u32)>,
        stop: watch::Sender<bool>,
        watching: tokio::task::JoinHandle<()>,
    }

    fn watched(metrics: &Metrics) -> Watched {
        let (lot, events) = Lot::new(metrics).unwrap();
        let lot = Arc::new(lot);
        let (sender, unparked) = tokio::sync::mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let watching = tokio::spawn({
            let lot = lot.clone();
            async move {
                lot.watch(events, stopped, |socket, with| {
                    sender.send((socket, with)).unwrap()
                })
                .await;
            }
        });
        Watched {
            lot,
            unparked,
            stop,
            watching,
        }
    }

    const LONG: Duration = Duration::from_secs(600);

    #[tokio::test]
    async fn a_parked_socket_comes_back_with_its_bytes_when_its_client_writes() {
        let metrics = Metrics::new();
        let mut lot = watched(&metrics);
        let (mut client, server) = connected();
        lot.lot.park(server, Instant::now() + LONG, 7);
        assert_eq!(metrics.connections_parked.get(), 1);
        client.write_all(b"GET").unwrap();
        let (mut socket, with) = lot.unparked.recv().await.unwrap();
        assert_eq!(with, 7);
        assert_eq!(metrics.connections_parked.get(), 0);
        let mut read = [0; 3];
        socket.set_nonblocking(false).unwrap();
        socket.read_exact(&mut read).unwrap();
        assert_eq!(&read, b"GET");
    }

    #[tokio::test]
    async fn a_socket_readable_before_it_parks_comes_back_at_once() {
        let metrics = Metrics::new();
        let mut lot = watched(&metrics);
        let (mut client, server) = connected();
        client.write_all(b"early").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        lot.lot.park(server, Instant::now() + LONG, 1);
        assert_eq!(lot.unparked.recv().await.unwrap().1, 1);
    }

    #[tokio::test]
    async fn each_parked_socket_closes_at_its_own_deadline() {
        let metrics = Metrics::new();
        let lot = watched(&metrics);
        let (mut late_client, late) = connected();
        let (mut soon_client, soon) = connected();
        // The later deadline first: the watcher must wake for the earlier one parked after.
        lot.lot.park(late, Instant::now() + LONG, 1);
        lot.lot
            .park(soon, Instant::now() + Duration::from_millis(100), 2);
        assert!(
            tokio::task::spawn_blocking(move || closed_by_server(&mut soon_client))
                .await
                .unwrap()
        );
        assert_eq!(metrics.connections_parked.get(), 1);
        late_client.set_nonblocking(true).unwrap();
        let still_open = late_client.read(&mut [0; 8]);
        assert_eq!(still_open.unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }

    /// Whether the server's end of `client` is still open (nothing to read yet).
    fn open_at_server(client: &mut std::net::TcpStream) -> bool {
        client.set_nonblocking(true).unwrap();
        let read = client.read(&mut [0; 8]);
        client.set_nonblocking(false).unwrap();
        matches!(read, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    #[tokio::test]
    async fn room_is_made_by_closing_an_eighth_of_the_parked_longest_parked_first() {
        let metrics = Metrics::new();
        let lot = watched(&metrics);
        let now = Instant::now();
        let mut clients = Vec::new();
        for n in 0..17u32 {
            let (client, server) = connected();
            lot.lot
                .park(server, now + LONG + Duration::from_secs(n.into()), n);
            clients.push(client);
        }
        assert_eq!(lot.lot.make_room(), 2, "an eighth of 17");
        assert_eq!(lot.lot.make_room(), 1, "at least one");
        assert_eq!(metrics.connections_parked.get(), 14);
        assert_eq!(metrics.parked_closed_for_room.get(), 3);
        let mut clients = clients.into_iter();
        for mut closed in clients.by_ref().take(3) {
            let closed = tokio::task::spawn_blocking(move || closed_by_server(&mut closed));
            assert!(closed.await.unwrap(), "the longest parked are closed");
        }
        assert!(clients.all(|mut c| open_at_server(&mut c)));
    }

    #[tokio::test]
    async fn room_is_not_made_of_a_connection_whose_next_request_waits() {
        let metrics = Metrics::new();
        // Not watched: the waiting request stays in the lot.
        let (lot, _events) = Lot::new(&metrics).unwrap();
        let now = Instant::now();
        let (mut asking, older) = connected();
        let (mut idle, newer) = connected();
        lot.park(older, now + LONG, 0);
        lot.park(newer, now + LONG + Duration::from_secs(1), 1);
        asking.write_all(b"GET").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(lot.make_room(), 1);
        assert!(open_at_server(&mut asking), "the one asking is left");
        let closed = tokio::task::spawn_blocking(move || closed_by_server(&mut idle));
        assert!(closed.await.unwrap(), "the idle one is closed");
        assert_eq!(metrics.connections_parked.get(), 1);
    }

    #[tokio::test]
    async fn stopping_closes_every_parked_socket_and_parks_no_more() {
        let metrics = Metrics::new();
        let lot = watched(&metrics);
        let mut clients = Vec::new();
        for n in 0..3 {
            let (client, server) = connected();
            lot.lot.park(server, Instant::now() + LONG, n);
            clients.push(client);
        }
        lot.stop.send(true).unwrap();
        lot.watching.await.unwrap();
        let (client, server) = connected();
        lot.lot.park(server, Instant::now() + LONG, 9);
        clients.push(client);
        assert_eq!(metrics.connections_parked.get(), 0);
        for mut client in clients {
            assert!(closed_by_server(&mut client));
        }
    }

    #[test]
    fn the_tail_follows_bytes_across_reads() {
        let (io, _) = tokio::io::duplex(64);
        let mut parking = Parking {
            inner: io,
            read_ahead: Bytes::new(),
            exchanges: Arc::default(),
            park_after: Some(PARK_AFTER),
            tail: 0,
            unflushed: false,
            idle_since: None,
            quiet: None,
            parked: false,
        };
        for (bytes, ends_head) in [
            (&b"GET / HTTP/1.1\r\nHost: x\r\n"[..], false),
            (b"\r", false),
            (b"\n", true),
            (b"GET", false),
            (b" / HTTP/1.1\r\n\r\n", true),
            (b"", true),
        ] {
            parking.handed(bytes);
            assert_eq!(parking.tail == END_OF_HEAD, ends_head, "{bytes:?}");
        }
    }
}
