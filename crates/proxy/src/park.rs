//! Idle HTTP/1.1 connections parked outside hyper.
//!
//! hyper keeps, for each connection, an 8 KiB read buffer, an 8 KiB write buffer, the
//! last response's `HeaderMap` and its connection state for as long as the connection
//! lives, idle or not (docs/benchmarks.md, "idle connections parked outside hyper").
//! A connection that stays idle for [`PARK_AFTER`] is therefore ended inside hyper and
//! kept as its bare socket: [`Parking`], the IO hyper is given, answers hyper's next
//! read with an end of stream, which hyper takes for a client that closed between
//! requests and ends with `Ok`, its socket untouched; the server then waits for the
//! socket to be readable and starts a new hyper connection on it.
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

use std::collections::BTreeMap;
use std::future::Future as _;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body::{Body as HttpBody, Frame, SizeHint};
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

/// A transport a parked connection can wait on, without hyper, for its next bytes.
pub trait Transport: AsyncRead + AsyncWrite + AsRawFd + Unpin + Send + Sync + 'static {
    /// Whether connections on this transport are parked.
    const PARKS: bool;
    /// Ready once the transport has bytes (or its end, or an error) to read.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl Transport for tokio::net::TcpStream {
    const PARKS: bool = true;
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        tokio::net::TcpStream::poll_read_ready(self, cx)
    }
}

impl Transport for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    const PARKS: bool = false;
    fn poll_read_ready(&self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
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

/// The parked connections of one listener, each by its idle deadline and socket. One
/// task (`close_when_due`) closes those whose deadline passed, and all of them when
/// the server stops, so a parked connection's own task needs no timer and no wait on
/// the stop signal: it holds its socket, a ticket here and little more (a few hundred
/// bytes, against the serving task's kilobyte and more).
#[derive(Default)]
pub struct Lot {
    spots: Mutex<Spots>,
    /// Wakes `close_when_due` when a spot's deadline comes before all others.
    earlier: Notify,
}

#[derive(Default)]
struct Spots {
    /// Socket by (deadline, ticket number). A socket is here only while its parked
    /// task holds it open: the task leaves (under the lock) before it closes the
    /// socket, and the socket is shut down only under the lock.
    open: BTreeMap<(Instant, u64), RawFd>,
    next_ticket: u64,
    /// The server stopped: no more parking.
    closed: bool,
}

/// A parked connection's place in the [`Lot`]; leaving the lot when dropped.
pub struct Ticket<'a> {
    lot: &'a Lot,
    key: (Instant, u64),
}

impl Lot {
    fn spots(&self) -> MutexGuard<'_, Spots> {
        self.spots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parks the connection on `socket` until `deadline`; `None` once the server stops.
    /// The socket must stay open while the ticket lives.
    pub fn park(&self, socket: RawFd, deadline: Instant) -> Option<Ticket<'_>> {
        let mut spots = self.spots();
        if spots.closed {
            return None;
        }
        let key = (deadline, spots.next_ticket);
        spots.next_ticket += 1;
        let earliest = spots
            .open
            .first_key_value()
            .is_none_or(|(first, _)| key < *first);
        spots.open.insert(key, socket);
        drop(spots);
        if earliest {
            self.earlier.notify_one();
        }
        Some(Ticket { lot: self, key })
    }

    /// Closes each parked connection when its deadline passes, and all of them once
    /// `stop` turns true; runs until then.
    pub async fn close_when_due(&self, mut stop: watch::Receiver<bool>) {
        let mut stopping = std::pin::pin!(stop.wait_for(|&stopping| stopping));
        loop {
            let next = self
                .spots()
                .open
                .first_key_value()
                .map(|((due, _), _)| *due);
            // Without one, an hour: any park before then wakes this through `earlier`.
            let due = next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                () = tokio::time::sleep_until(due) => self.close_due(Instant::now()),
                () = self.earlier.notified() => {}
                _ = stopping.as_mut() => break,
            }
        }
        let mut spots = self.spots();
        spots.closed = true;
        for socket in std::mem::take(&mut spots.open).into_values() {
            shut_down(socket);
        }
    }

    fn close_due(&self, now: Instant) {
        let mut spots = self.spots();
        while let Some(entry) = spots.open.first_entry() {
            if entry.key().0 > now {
                break;
            }
            shut_down(entry.remove());
        }
    }
}

impl Ticket<'_> {
    /// Leaves the lot to be served again; `false` when the lot closed the connection
    /// meanwhile (its deadline passed, or the server stopped).
    pub fn leave(self) -> bool {
        let stayed = self.lot.spots().open.remove(&self.key).is_some();
        // Out of the lot already: dropping would only look again.
        std::mem::forget(self);
        stayed
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.lot.spots().open.remove(&self.key);
    }
}

/// Ends both directions of a parked connection: its task wakes (the socket reads its
/// end), finds itself out of the lot and closes the socket; the client sees the
/// close at once.
fn shut_down(socket: RawFd) {
    #[allow(unsafe_code, reason = "std cannot shut down a socket it does not own")]
    // SAFETY: the descriptor is open: it is in the lot, whose lock the caller holds,
    // and its task closes it only after leaving the lot under that lock. `shutdown`
    // touches no memory of ours.
    let _ = unsafe { libc::shutdown(socket, libc::SHUT_RDWR) };
}

/// Counts a connection parked while it lives.
pub struct ParkedMark<'a>(&'a Metrics);

impl<'a> ParkedMark<'a> {
    pub fn new(metrics: &'a Metrics) -> Self {
        metrics.connection_parks.inc();
        metrics.connections_parked.inc();
        ParkedMark(metrics)
    }
}

impl Drop for ParkedMark<'_> {
    fn drop(&mut self) {
        self.0.connections_parked.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
