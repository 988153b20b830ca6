//! The HTTP/2 listener for TLS connections that chose `h2` by ALPN, on the `h2`
//! crate's server rather than hyper's: hyper's server cannot send a 1xx response, and
//! 103 Early Hints is what a browser acts on before the page arrives. Requests go to
//! the same [`Pipeline::handle`](crate::pipeline::Pipeline::handle) (and link
//! endpoint) as HTTP/1.1's; only the framing differs.
//!
//! Per connection: the settings hyper's server used (1 MiB stream and connection
//! windows, 200 concurrent streams, 400 KiB send buffer per stream, the header list
//! limit), a ping every 30 s answered within 20 s or the connection is closed, and a
//! graceful shutdown (GOAWAY, in-flight streams finish) when the server stops.
//!
//! Order (`[http2] prioritize`, off by default: it cost ~5 % CPU per request under
//! h2load and gained nothing measurable on the inline bench, docs/benchmarks.md): a
//! connection's responses go out most urgent first ([`Scheduler`]). Each request's urgency is its RFC 9218
//! `Priority` field, or a default by destination, the page first
//! ([`Priority::of_request`]); pushes are the least urgent. So that the order holds
//! on the wire and not only in front of `h2`, what waits below the scheduler is kept
//! small: `h2` buffers one frame per stream, and the socket's unsent bytes are bounded
//! (`TCP_NOTSENT_LOWAT`, `[http2] unsent_bytes`).
//!
//! Push: a response carrying [`PushPromises`](crate::pipeline::hint::PushPromises)
//! (the hint stage's, with `hints.push` on) gets a PUSH_PROMISE per resource right
//! after its head; each promised request (the page's codings, none of its
//! credentials) is answered through the responder like any request, and pushed when
//! it is a complete cacheable 200. A client that turned push off (every browser)
//! refuses the first promise and no more are tried; one that already holds a pushed
//! resource resets its stream, which stops the body.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::{Body as HttpBody, Frame};
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use wirefold_http::priority::{Priority, LEAST_URGENT};

use crate::body::{self, Body, BoxError};
use crate::config_error::ConfigError;
use crate::model::ConnInfo;

/// The `[http2]` section: how responses share an HTTP/2 connection.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http2Config {
    /// Send a connection's responses most urgent first (the page before its
    /// subresources); off, `h2` interleaves every stream with data frame by frame.
    pub prioritize: bool,
    /// `TCP_NOTSENT_LOWAT` of HTTP/2 connections' sockets (with `prioritize`): the
    /// kernel holds at most about this many bytes not yet sent, so an urgent
    /// response does not queue behind megabytes of others. 0 leaves the kernel's.
    pub unsent_bytes: u32,
}

impl Default for Http2Config {
    fn default() -> Self {
        Http2Config {
            prioritize: false,
            unsent_bytes: 32 * 1024,
        }
    }
}

/// The bounds of `http2.unsent_bytes` (besides 0): below a few frames the socket
/// would wake the writer for every packet; above, the order would not hold.
const UNSENT_BYTES: std::ops::RangeInclusive<u32> = 4096..=4 * 1024 * 1024;

impl Http2Config {
    /// The section's problems, each naming its key.
    pub fn problems(&self) -> Vec<ConfigError> {
        let mut problems = Vec::new();
        if self.unsent_bytes != 0 && !UNSENT_BYTES.contains(&self.unsent_bytes) {
            problems.push(ConfigError::Invalid {
                key: "http2.unsent_bytes",
                message: format!(
                    "must be 0 (the kernel's default) or between {} and {}",
                    UNSENT_BYTES.start(),
                    UNSENT_BYTES.end()
                ),
            });
        }
        problems
    }
}

/// What the listener needs per connection.
pub struct H2Settings {
    pub max_header_list_size: u32,
    pub http2: Http2Config,
}

/// What `h2` may buffer per stream: one DATA frame (its default largest) when
/// responses are ordered, so a stream paused by the scheduler has little queued
/// ahead of a more urgent one; hyper's 400 KiB otherwise.
const ORDERED_SEND_BUFFER: usize = 16 * 1024;
const UNORDERED_SEND_BUFFER: usize = 400 * 1024;

/// How often an idle connection is pinged, and how long its answer may take.
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(20);

/// What answers a connection's requests: the early hints for a request (if any) and
/// its response.
pub trait Responder: Send + Sync + 'static {
    /// The fields of a 103 Early Hints response to send before answering `req`.
    fn early_hints(
        &self,
        req: &Request<Body>,
        conn: ConnInfo,
    ) -> Pin<Box<dyn std::future::Future<Output = Option<HeaderMap>> + Send + '_>>;
    /// The response to `req`.
    fn respond(
        self: Arc<Self>,
        req: Request<Body>,
        conn: ConnInfo,
    ) -> Pin<Box<dyn std::future::Future<Output = Response<Body>> + Send>>;
}

/// Serves one HTTP/2 connection until the client closes it, it fails, or `stop`
/// changes (then gracefully: GOAWAY, and the streams in flight finish).
pub async fn serve<S, R>(
    io: S,
    settings: H2Settings,
    responder: Arc<R>,
    conn: ConnInfo,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    R: Responder,
{
    let prioritize = settings.http2.prioritize;
    if let (true, Some(socket), unsent @ 1..) =
        (prioritize, conn.socket, settings.http2.unsent_bytes)
    {
        set_unsent_limit(socket, unsent);
    }
    let scheduler = Scheduler::new(prioritize);
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(1024 * 1024)
        .initial_connection_window_size(1024 * 1024)
        .max_concurrent_streams(200)
        .max_send_buffer_size(if prioritize {
            ORDERED_SEND_BUFFER
        } else {
            UNORDERED_SEND_BUFFER
        })
        .max_header_list_size(settings.max_header_list_size);
    let mut connection = match builder.handshake::<_, Bytes>(io).await {
        Ok(connection) => connection,
        Err(e) => return tracing::debug!(peer = %conn.peer, error = %e, "h2 handshake failed"),
    };
    let (dead, mut peer_dead) = tokio::sync::oneshot::channel::<()>();
    if let Some(ping_pong) = connection.ping_pong() {
        tokio::spawn(keep_alive(ping_pong, dead));
    }
    let mut stopping = *stop.borrow();
    if stopping {
        connection.graceful_shutdown();
    }
    loop {
        tokio::select! {
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    tokio::spawn(answer(responder.clone(), request, respond, conn, scheduler.clone()));
                }
                Some(Err(e)) => {
                    tracing::debug!(peer = %conn.peer, error = %e, "h2 connection ended");
                    return;
                }
                None => return,
            },
            changed = stop.changed(), if !stopping => {
                stopping = true;
                let _ = changed;
                connection.graceful_shutdown();
            }
            // Only a ping left unanswered; the watcher ending with the connection
            // (its sender dropped) is not a verdict.
            Ok(()) = &mut peer_dead => {
                tracing::debug!(peer = %conn.peer, "h2 peer did not answer a ping: closing");
                connection.abrupt_shutdown(Reason::NO_ERROR);
                // Let the GOAWAY out, then stop.
                let _ = tokio::time::timeout(PING_TIMEOUT, poll_fn(|cx| connection.poll_closed(cx))).await;
                return;
            }
        }
    }
}

/// Pings every [`PING_INTERVAL`]; resolves `dead` when an answer takes longer than
/// [`PING_TIMEOUT`]. Ends with the connection.
async fn keep_alive(mut ping_pong: h2::PingPong, dead: tokio::sync::oneshot::Sender<()>) {
    loop {
        tokio::time::sleep(PING_INTERVAL).await;
        match tokio::time::timeout(PING_TIMEOUT, ping_pong.ping(h2::Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            // The connection is gone: nothing to watch.
            Ok(Err(_)) => return,
            Err(_) => {
                let _ = dead.send(());
                return;
            }
        }
    }
}

/// Bounds the bytes the kernel holds unsent on `socket` (`TCP_NOTSENT_LOWAT`): what
/// is queued there goes out first come, first served, whatever its urgency.
#[allow(unsafe_code)] // std has no setsockopt
fn set_unsent_limit(socket: std::os::fd::RawFd, bytes: u32) {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `socket` is the connection's open socket (`ConnInfo::socket`), and the
    // option's value is a c_int of the size passed.
    let set = unsafe {
        libc::setsockopt(
            socket,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if set != 0 {
        let error = std::io::Error::last_os_error();
        tracing::debug!(%error, "TCP_NOTSENT_LOWAT not set");
    }
}

/// Which of a connection's streams may hand `h2` body data: a stream holding data
/// waits while a more urgent one holds some (RFC 9218: urgency first; equal
/// urgencies share, frame by frame, as `h2` sends them). A stream holds data from
/// the moment its body yields some until its body has nothing more ready, so a
/// response waiting for its origin never holds others back. A waiting stream has
/// reserved no flow-control capacity: it cannot hold the connection window a more
/// urgent one needs.
#[derive(Clone)]
struct Scheduler(Option<Arc<watch::Sender<Holding>>>);

/// How many streams hold data, by urgency.
type Holding = [u32; LEAST_URGENT as usize + 1];

impl Scheduler {
    /// A connection's scheduler; one that is off lets every stream send at once.
    fn new(on: bool) -> Self {
        Scheduler(on.then(|| Arc::new(watch::Sender::new(Holding::default()))))
    }

    /// The turn of a stream of `urgency`.
    fn turn(&self, urgency: u8) -> Turn {
        Turn {
            levels: self
                .0
                .as_ref()
                .map(|levels| (levels.clone(), levels.subscribe())),
            urgency: usize::from(urgency.min(LEAST_URGENT)),
            holding: false,
        }
    }
}

/// One stream's place in its connection's [`Scheduler`]; gives it up when dropped.
struct Turn {
    levels: Option<(Arc<watch::Sender<Holding>>, watch::Receiver<Holding>)>,
    urgency: usize,
    holding: bool,
}

impl Turn {
    /// Marks the stream as holding data (`true`) or not.
    fn hold(&mut self, holding: bool) {
        let Some((levels, _)) = &self.levels else {
            return;
        };
        if holding != self.holding {
            self.holding = holding;
            let urgency = self.urgency;
            levels.send_modify(|held| {
                if holding {
                    held[urgency] += 1;
                } else {
                    held[urgency] -= 1;
                }
            });
        }
    }

    /// The most a stream hands `h2` at once: a frame when its order matters, else all
    /// it has (fewer wakeups per response).
    fn piece(&self) -> usize {
        if self.levels.is_some() {
            ORDERED_SEND_BUFFER
        } else {
            usize::MAX
        }
    }

    /// Waits until no more urgent stream holds data.
    async fn wait(&mut self) {
        if let Some((_, watching)) = &mut self.levels {
            let urgency = self.urgency;
            // The sender lives as long as this turn: the wait cannot fail.
            let _ = watching
                .wait_for(|held| held[..urgency].iter().all(|&n| n == 0))
                .await;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.hold(false);
    }
}

/// One stream: 103 Early Hints when the responder has any, then the response.
async fn answer<R: Responder>(
    responder: Arc<R>,
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    conn: ConnInfo,
    scheduler: Scheduler,
) {
    let request = request.map(|stream| {
        body::boxed(RecvBody {
            stream,
            data_done: false,
            done: false,
        })
    });
    // For the debug lines that time an exchange's heads (when a browser acts on a 103
    // is found by comparing them with its requests' arrivals); a cheap clone (`Bytes`).
    let uri = request.uri().clone();
    let priority = Priority::of_request(request.headers());
    tracing::debug!(
        path = uri.path(),
        field = ?request.headers().get("priority"),
        urgency = priority.urgency(),
        incremental = priority.incremental,
        "request priority"
    );
    if let Some(fields) = responder.early_hints(&request, conn).await {
        let links = fields.len();
        let mut early = Response::new(());
        *early.status_mut() = StatusCode::EARLY_HINTS;
        *early.headers_mut() = fields;
        match respond.send_informational(early) {
            Ok(()) => {
                tracing::debug!(peer = %conn.peer, path = uri.path(), links, "103 Early Hints sent")
            }
            Err(e) => tracing::debug!(error = %e, "103 Early Hints not sent"),
        }
    }
    // What a pushed request carries over from the page's: how the client decodes,
    // never who it is (a pushed response must be fit for anyone holding the page).
    let push_fields = push_request_fields(request.headers());
    let authority = request.uri().authority().cloned();
    let scheme = request.uri().scheme().cloned();
    let response = responder.clone().respond(request, conn).await;
    let (mut parts, body) = response.into_parts();
    strip_connection_fields(&mut parts.headers);
    let pushes = parts
        .extensions
        .remove::<crate::pipeline::hint::PushPromises>()
        .unwrap_or_default();
    let end = body.is_end_stream();
    let status = parts.status;
    let send = match respond.send_response(Response::from_parts(parts, ()), end) {
        Ok(send) => {
            tracing::debug!(peer = %conn.peer, path = uri.path(), %status, "response head sent");
            send
        }
        // The client reset the stream or left: the body is dropped unread.
        Err(e) => return tracing::debug!(error = %e, "h2 response not sent"),
    };
    // Promised right after the page's head, before its body names them.
    for path in pushes.0 {
        let mut uri = http::Uri::builder().path_and_query(path.as_str());
        if let (Some(scheme), Some(authority)) = (&scheme, &authority) {
            uri = uri.scheme(scheme.clone()).authority(authority.clone());
        }
        let Ok(promised) =
            uri.build()
                .and_then(|uri| Request::get(uri).body(()))
                .map(|mut promised| {
                    *promised.headers_mut() = push_fields.clone();
                    promised
                })
        else {
            continue;
        };
        match respond.push_request(promised.clone()) {
            Ok(pushed) => {
                let request = promised.map(|()| body::empty());
                let turn = scheduler.turn(LEAST_URGENT);
                tokio::spawn(push(responder.clone(), request, pushed, conn, turn));
            }
            // The client turned push off (every browser) or the stream is gone: stop.
            Err(e) => {
                tracing::debug!(error = %e, "push refused");
                break;
            }
        }
    }
    if !end {
        send_body(send, body, scheduler.turn(priority.urgency())).await;
    }
}

/// The fields a pushed request takes from the page's request: those that choose the
/// representation (codings, languages, client hints), none that identify the client.
fn push_request_fields(page_request: &HeaderMap) -> HeaderMap {
    let mut fields = HeaderMap::new();
    for name in [
        http::header::ACCEPT_ENCODING,
        http::header::ACCEPT_LANGUAGE,
        http::header::USER_AGENT,
    ] {
        if let Some(value) = page_request.get(&name) {
            fields.insert(name, value.clone());
        }
    }
    fields.insert(http::header::ACCEPT, http::HeaderValue::from_static("*/*"));
    fields
}

/// Answers one promised request through the responder and pushes the response when it
/// is a complete, cacheable 200 (`no-store`, `private` and `Set-Cookie` are not); the
/// promise is cancelled otherwise.
async fn push<R: Responder>(
    responder: Arc<R>,
    request: Request<Body>,
    mut pushed: h2::server::SendPushedResponse<Bytes>,
    conn: ConnInfo,
    turn: Turn,
) {
    let response = responder.respond(request, conn).await;
    let (mut parts, body) = response.into_parts();
    let cache_control = wirefold_http::cache_control::CacheControl::from_headers(&parts.headers);
    let fit = parts.status == StatusCode::OK
        && !cache_control.no_store
        && !cache_control.private
        && !parts.headers.contains_key(http::header::SET_COOKIE);
    if !fit {
        pushed.send_reset(Reason::CANCEL);
        return;
    }
    strip_connection_fields(&mut parts.headers);
    let end = body.is_end_stream();
    match pushed.send_response(Response::from_parts(parts, ()), end) {
        Ok(send) if !end => send_body(send, body, turn).await,
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "pushed response not sent"),
    }
}

/// HTTP/2 forbids connection-specific fields (RFC 9113 §8.2.2); `h2` refuses a
/// response carrying one.
fn strip_connection_fields(headers: &mut HeaderMap) {
    for name in [
        http::header::CONNECTION,
        http::header::TRANSFER_ENCODING,
        http::header::UPGRADE,
        http::header::TE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
}

/// Streams `body` as the client's flow control and the stream's `turn` allow; resets
/// the stream with INTERNAL_ERROR when the body fails (the client must not take a
/// truncated body as whole), and stops when the client resets it.
async fn send_body(mut send: SendStream<Bytes>, mut body: Body, mut turn: Turn) {
    loop {
        let frame = {
            let mut next = body.frame();
            // Nothing ready (the origin is slow): step aside until there is.
            match poll_fn(|cx| Poll::Ready(Pin::new(&mut next).poll(cx))).await {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    turn.hold(false);
                    tokio::select! {
                        frame = next => frame,
                        _ = poll_fn(|cx| send.poll_reset(cx)) => return,
                    }
                }
            }
        };
        let sent = match frame {
            None => send.send_data(Bytes::new(), true),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "response body failed: resetting the stream");
                send.send_reset(Reason::INTERNAL_ERROR);
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => match send_data(&mut send, data, &mut turn).await {
                    Ok(()) => continue,
                    Err(e) => Err(e),
                },
                Err(frame) => match frame.into_trailers() {
                    Ok(trailers) => send.send_trailers(trailers),
                    Err(_) => continue,
                },
            },
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "h2 response body not sent");
        }
        return;
    }
}

/// Sends `data` in the pieces the send window grants; with the scheduler, a frame at
/// a time, each when the stream's turn comes. Capacity is reserved only once the turn
/// has come: a stream that waits holds none of the connection's window.
async fn send_data(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    turn: &mut Turn,
) -> Result<(), h2::Error> {
    if !data.is_empty() {
        turn.hold(true);
    }
    while !data.is_empty() {
        turn.wait().await;
        send.reserve_capacity(data.len().min(turn.piece()));
        let granted = match poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => return Err(h2::Error::from(Reason::CANCEL)),
        };
        if granted > 0 {
            send.send_data(data.split_to(granted.min(data.len())), false)?;
        }
    }
    Ok(())
}

/// A request body as it arrives on its stream, returning flow-control capacity as it
/// is read (so a slow reader slows the client, and a fast one is not throttled).
struct RecvBody {
    stream: RecvStream,
    data_done: bool,
    done: bool,
}

impl HttpBody for RecvBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if !self.data_done {
            match ready!(self.stream.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.stream.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(e.into())));
                }
                None => self.data_done = true,
            }
        }
        self.done = true;
        match ready!(self.stream.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.stream.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::io::ReadBuf;

    /// The byte every body of `path` is made of (its first letter after `/`), and
    /// its size (the number after the second `/`): `/i1/2097152`.
    fn body_of(path: &str) -> (u8, usize) {
        let mut parts = path.trim_start_matches('/').split('/');
        let name = parts.next().unwrap().as_bytes();
        let size = parts.next().unwrap().parse().unwrap();
        (name[0] + name.len() as u8 + name.last().unwrap(), size)
    }

    /// Answers `/NAME/SIZE` with SIZE bytes at once; `/slow/SIZE` with one frame,
    /// then (when `release` is notified) the rest: an origin that takes its time.
    struct Bodies {
        release: Arc<tokio::sync::Notify>,
    }

    impl Responder for Bodies {
        fn early_hints(
            &self,
            _: &Request<Body>,
            _: ConnInfo,
        ) -> Pin<Box<dyn Future<Output = Option<HeaderMap>> + Send + '_>> {
            Box::pin(async { None })
        }

        fn respond(
            self: Arc<Self>,
            req: Request<Body>,
            _: ConnInfo,
        ) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
            let (byte, size) = body_of(req.uri().path());
            let whole = Bytes::from(vec![byte; size]);
            if !req.uri().path().starts_with("/slow/") {
                return Box::pin(async move { Response::new(body::full(whole)) });
            }
            let (tx, body) = body::channel(2);
            tokio::spawn(async move {
                let mut whole = whole;
                let first = whole.split_to(ORDERED_SEND_BUFFER);
                tx.send(Ok(first)).await.unwrap();
                self.release.notified().await;
                tx.send(Ok(whole)).await.unwrap();
            });
            Box::pin(async move { Response::new(body) })
        }
    }

    /// The client's end of the connection, noting each response's HEADERS and DATA
    /// frames (stream, DATA bytes) in the order they come off the wire: the server's
    /// bytes are frames, each a 9-byte header (length, type, flags, stream) and its
    /// payload.
    struct Wire<S> {
        inner: S,
        frames: Arc<Mutex<Vec<(u32, usize)>>>,
        header: Vec<u8>,
        payload_left: usize,
    }

    impl<S: AsyncRead + Unpin> AsyncRead for Wire<S> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let before = buf.filled().len();
            ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
            let mut new = &buf.filled()[before..];
            while !new.is_empty() {
                if self.payload_left > 0 {
                    let skipped = self.payload_left.min(new.len());
                    self.payload_left -= skipped;
                    new = &new[skipped..];
                    continue;
                }
                let wanted = (9 - self.header.len()).min(new.len());
                self.header.extend_from_slice(&new[..wanted]);
                new = &new[wanted..];
                if self.header.len() == 9 {
                    let h = std::mem::take(&mut self.header);
                    let length =
                        usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    match h[3] {
                        0 => self.frames.lock().unwrap().push((stream, length)),
                        1 => self.frames.lock().unwrap().push((stream, 0)),
                        _ => {}
                    }
                    self.payload_left = length;
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    impl<S: AsyncWrite + Unpin> AsyncWrite for Wire<S> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }
        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    type Fields = &'static [(&'static str, &'static str)];

    /// Asks for each of `early` (on one connection, with `prioritize`), waits until
    /// every one is streaming, then asks for `late`. Checks every body whole, and
    /// returns how many bytes of the others went on the wire between `late`'s
    /// response head and its last DATA frame. `/slow/` bodies are let go once every
    /// early one is complete.
    async fn bytes_beside_late(
        prioritize: bool,
        early: &[(&'static str, Fields)],
        late: (&'static str, Fields),
    ) -> usize {
        let (server_io, client_io) = tokio::io::duplex(64 * 1024);
        let release = Arc::new(tokio::sync::Notify::new());
        let responder = Arc::new(Bodies {
            release: release.clone(),
        });
        let settings = H2Settings {
            max_header_list_size: 64 * 1024,
            http2: Http2Config {
                prioritize,
                ..Http2Config::default()
            },
        };
        let conn = ConnInfo {
            peer: ([127, 0, 0, 1], 1).into(),
            tls: true,
            socket: None,
        };
        let (_stop, stop) = watch::channel(false);
        tokio::spawn(serve(server_io, settings, responder, conn, stop));
        let frames = Arc::new(Mutex::new(Vec::new()));
        let wire = Wire {
            inner: client_io,
            frames: frames.clone(),
            header: Vec::new(),
            payload_left: 0,
        };
        let (client, connection) = h2::client::Builder::new()
            .initial_window_size(16 * 1024 * 1024)
            .initial_connection_window_size(64 * 1024 * 1024)
            .handshake::<_, Bytes>(wire)
            .await
            .unwrap();
        tokio::spawn(connection);
        // Sends one request; the body's reader, and a signal at its first bytes.
        let ask = |path: &'static str, fields: Fields| {
            let client = client.clone();
            async move {
                let mut request = Request::get(format!("https://localhost{path}"));
                for (name, value) in fields {
                    request = request.header(*name, *value);
                }
                let mut client = client.ready().await.unwrap();
                let (response, _) = client
                    .send_request(request.body(()).unwrap(), true)
                    .unwrap();
                let stream = response.stream_id().as_u32();
                let (started, streaming) = tokio::sync::oneshot::channel();
                let reader = tokio::spawn(async move {
                    let mut body = response.await.unwrap().into_body();
                    let mut received = Vec::new();
                    let mut started = Some(started);
                    while let Some(data) = body.data().await {
                        let data = data.unwrap();
                        let _ = body.flow_control().release_capacity(data.len());
                        received.extend_from_slice(&data);
                        if let Some(started) = started.take() {
                            let _ = started.send(());
                        }
                    }
                    assert_eq!(received, vec![body_of(path).0; body_of(path).1], "{path}");
                });
                (stream, streaming, reader)
            }
        };
        let mut readers = Vec::new();
        for (path, fields) in early {
            let (_, streaming, reader) = ask(path, fields).await;
            streaming.await.unwrap();
            readers.push(reader);
        }
        let (late_stream, _, late_reader) = ask(late.0, late.1).await;
        for reader in readers {
            reader.await.unwrap();
        }
        release.notify_one();
        late_reader.await.unwrap();
        let frames = frames.lock().unwrap();
        let first = frames.iter().position(|f| f.0 == late_stream).unwrap();
        let last = frames.iter().rposition(|f| f.0 == late_stream).unwrap();
        frames[first..last]
            .iter()
            .filter(|f| f.0 != late_stream)
            .map(|f| f.1)
            .sum()
    }

    const IMAGE: Fields = &[("sec-fetch-dest", "image")];
    const PAGE: Fields = &[("sec-fetch-dest", "document")];
    /// What may still go out of a stream the scheduler pauses: the frame `h2` holds
    /// for it and the one it was handing over.
    const LEAK: usize = 2 * ORDERED_SEND_BUFFER;

    #[tokio::test]
    async fn the_page_goes_out_before_the_images_asked_for_earlier() {
        let images: [(&str, Fields); 4] = [
            ("/i1/2097152", IMAGE),
            ("/i2/2097152", IMAGE),
            ("/i3/2097152", IMAGE),
            ("/i4/2097152", IMAGE),
        ];
        let page = ("/page/262144", PAGE);
        let beside = bytes_beside_late(true, &images, page).await;
        assert!(
            beside <= 4 * LEAK,
            "{beside} bytes of images within the page"
        );
        // Without the scheduler, frame by frame: the page shares the wire.
        let unordered = bytes_beside_late(false, &images, page).await;
        assert!(unordered > 4 * LEAK, "{unordered}");
    }

    #[tokio::test]
    async fn the_priority_field_wins_over_the_destination() {
        const LOW_PAGE: Fields = &[("sec-fetch-dest", "document"), ("priority", "u=5")];
        const URGENT_IMAGE: Fields = &[("sec-fetch-dest", "image"), ("priority", "u=0")];
        let beside = bytes_beside_late(
            true,
            &[("/page/4194304", LOW_PAGE)],
            ("/img/262144", URGENT_IMAGE),
        )
        .await;
        assert!(
            beside <= LEAK,
            "{beside} bytes of the page within the image"
        );
    }

    #[tokio::test]
    async fn garbage_priority_fields_are_ignored() {
        // Read loosely, each would make the image as urgent as the page.
        let images: [(&str, Fields); 3] = [
            (
                "/i1/2097152",
                &[("sec-fetch-dest", "image"), ("priority", "u=0,,")],
            ),
            (
                "/i2/2097152",
                &[("sec-fetch-dest", "image"), ("priority", "u=0 x")],
            ),
            (
                "/i3/2097152",
                &[
                    ("sec-fetch-dest", "image"),
                    ("priority", "u=00000000000000000"),
                ],
            ),
        ];
        let beside = bytes_beside_late(true, &images, ("/page/262144", PAGE)).await;
        assert!(
            beside <= 3 * LEAK,
            "{beside} bytes of images within the page"
        );
    }

    #[tokio::test]
    async fn a_page_waiting_for_its_origin_holds_nothing_back() {
        // The page's rest comes only once the images are complete: were they held
        // back while it waits, this would never end.
        let images: [(&str, Fields); 2] = [("/i1/1048576", IMAGE), ("/i2/1048576", IMAGE)];
        let waited = tokio::time::timeout(
            Duration::from_secs(60),
            bytes_beside_late(true, &images, ("/slow/262144", PAGE)),
        )
        .await;
        let beside = waited.expect("the images were held back by a page with nothing to send");
        assert!(beside > 0);
    }
}
