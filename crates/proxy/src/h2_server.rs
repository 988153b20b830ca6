//! The HTTP/2 listener (TLS connections that chose `h2` by ALPN, and h2c by prior
//! knowledge), on the `h2` crate's server rather than hyper's: hyper's server cannot
//! send a 1xx response, and 103 Early Hints is what a browser acts on before the page
//! arrives. Requests go to
//! the same [`Pipeline::handle`](crate::pipeline::Pipeline::handle) (and link
//! endpoint) as HTTP/1.1's; only the framing differs.
//!
//! Per connection: the settings hyper's server used (1 MiB stream and connection
//! windows, 200 concurrent streams, 400 KiB send buffer per stream, the header list
//! limit), a ping every 30 s answered within 20 s or the connection is closed, and a
//! graceful shutdown (GOAWAY, in-flight streams finish) when the server stops.
//!
//! Order (`[http2] prioritize`): a connection's responses go out most urgent first.
//! Each request's urgency is its RFC 9218 `Priority` field, or a default by
//! destination, the page first ([`Priority::of_request`]); pushes are the least
//! urgent. The choice is made where it still matters: a stream hands `h2` body data
//! only within the connection's `h2_budget::Budget` of bytes `h2` holds unwritten
//! (`[http2] budget_bytes`), the most urgent waiting stream first when room opens,
//! and below `h2` little may queue either: rustls's buffer (`[http2]
//! tls_buffer_bytes`) and the socket's unsent bytes (`TCP_NOTSENT_LOWAT`, `[http2]
//! unsent_bytes`).
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
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
use tokio::sync::{watch, Notify};
use wirefold_http::priority::{Priority, LEAST_URGENT};

use crate::body::{self, Body, BoxError};
use crate::config_error::ConfigError;
use crate::h2_budget::{Budget, Metered};
use crate::model::ConnInfo;

/// The `[http2]` section: how responses share an HTTP/2 connection.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http2Config {
    /// Send a connection's responses most urgent first (the page before its
    /// subresources); off, `h2` interleaves every stream with data frame by frame.
    pub prioritize: bool,
    /// With `prioritize`: the response bytes a connection's streams may have handed
    /// `h2` and `h2` not yet written to TLS (one frame more at most); the rest
    /// waits in front of `h2`, where the most urgent stream goes next.
    pub budget_bytes: u32,
    /// With `prioritize`: what the TLS layer may hold of a connection's records once
    /// its socket backs up (they go out in order, whatever their urgency). 0 leaves
    /// rustls's own limit (64 KiB).
    pub tls_buffer_bytes: u32,
    /// `TCP_NOTSENT_LOWAT` of HTTP/2 connections' sockets (with `prioritize`): the
    /// kernel holds at most about this many bytes not yet sent, so an urgent
    /// response does not queue behind megabytes of others. 0 leaves the kernel's.
    pub unsent_bytes: u32,
    /// A connection with no stream answered for this long is closed (GOAWAY; pings
    /// do not count): an idle one holds a place among `limits.max_connections`.
    /// Checked each period, so it closes between one and two of them.
    pub idle_timeout_ms: u64,
}

impl Default for Http2Config {
    fn default() -> Self {
        Http2Config {
            prioritize: true,
            // The inline bench's page came earliest with all three at 8 KiB
            // (docs/benchmarks.md, "A budget on what waits in `h2`").
            budget_bytes: 8 * 1024,
            tls_buffer_bytes: 8 * 1024,
            unsent_bytes: 8 * 1024,
            // nginx's `http2_idle_timeout` (before 1.19.7); browsers and the link's
            // client proxy keep a connection for a next page or request.
            idle_timeout_ms: 180_000,
        }
    }
}

/// The bounds of `http2.unsent_bytes`, `tls_buffer_bytes` (each besides 0) and
/// `budget_bytes`: below a few frames the socket would wake the writer for every
/// packet; above, the order would not hold.
const QUEUE_BYTES: std::ops::RangeInclusive<u32> = 4096..=4 * 1024 * 1024;

impl Http2Config {
    /// The section's problems, each naming its key.
    pub fn problems(&self) -> Vec<ConfigError> {
        let mut problems = Vec::new();
        let range = format!("between {} and {}", QUEUE_BYTES.start(), QUEUE_BYTES.end());
        for (key, value, zero) in [
            (
                "http2.unsent_bytes",
                self.unsent_bytes,
                Some("the kernel's default"),
            ),
            (
                "http2.tls_buffer_bytes",
                self.tls_buffer_bytes,
                Some("rustls's default"),
            ),
            ("http2.budget_bytes", self.budget_bytes, None),
        ] {
            if QUEUE_BYTES.contains(&value) || (value == 0 && zero.is_some()) {
                continue;
            }
            let message = match zero {
                Some(zero) => format!("must be 0 ({zero}) or {range}"),
                None => format!("must be {range}"),
            };
            problems.push(ConfigError::Invalid { key, message });
        }
        if self.idle_timeout_ms < 1000 {
            problems.push(ConfigError::Invalid {
                key: "http2.idle_timeout_ms",
                message: "must be at least 1000 (1 s)".into(),
            });
        }
        problems
    }
}

/// What the listener needs per connection.
pub struct H2Settings {
    pub max_header_list_size: u32,
    pub http2: Http2Config,
    /// The listener's HTTP/2 connections, this one to be listed among them.
    pub connections: Arc<Http2Connections>,
}

/// A listener's HTTP/2 connections, so that at its connection limit those with no
/// stream being answered can be closed (gracefully) to make room for a new client, as
/// nginx closes its idle HTTP/2 connections at `worker_connections`.
#[derive(Default)]
pub struct Http2Connections {
    listed: Mutex<slab::Slab<Listed>>,
    closed_for_room: prometheus_client::metrics::counter::Counter,
}

struct Listed {
    /// Held strongly by the connection's `Idleness` and each answer being made.
    answering: Weak<()>,
    listed_at: std::time::Instant,
    closing: Arc<Closing>,
}

/// Whether a connection is closing (asked to, or of its own accord: not counted
/// again while it winds down), and the wake that asks it.
#[derive(Default)]
struct Closing {
    started: AtomicBool,
    asked: Notify,
}

/// A connection's place among its listener's, left when it ends.
struct Listing {
    connections: Arc<Http2Connections>,
    key: usize,
    closing: Arc<Closing>,
}

impl Listing {
    /// The connection began to close.
    fn closing(&self) {
        self.closing.started.store(true, Ordering::Relaxed);
    }

    /// Resolves when the connection is asked to close for room.
    async fn asked_to_close(&self) {
        self.closing.asked.notified().await;
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        self.connections.lock().remove(self.key);
    }
}

/// The most connections [`Http2Connections::make_room`] closes at once (nginx's).
const MOST_CLOSED_FOR_ROOM: usize = 32;

/// Connections younger than this are not closed for room.
const YOUNGEST_CLOSED_FOR_ROOM: Duration = Duration::from_secs(1);

impl Http2Connections {
    /// Counts the connections closed for room in `closed_for_room`.
    pub fn new(closed_for_room: prometheus_client::metrics::counter::Counter) -> Self {
        Http2Connections {
            listed: Mutex::default(),
            closed_for_room,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, slab::Slab<Listed>> {
        self.listed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists a connection whose answers in progress hold `answering`.
    fn list(self: &Arc<Self>, answering: &Arc<()>) -> Listing {
        let closing = Arc::new(Closing::default());
        let key = self.lock().insert(Listed {
            answering: Arc::downgrade(answering),
            listed_at: std::time::Instant::now(),
            closing: closing.clone(),
        });
        Listing {
            connections: self.clone(),
            key,
            closing,
        }
    }

    /// Asks an eighth of the connections answering nothing now (1 to
    /// [`MOST_CLOSED_FOR_ROOM`]), the oldest first and none younger than
    /// [`YOUNGEST_CLOSED_FOR_ROOM`] (a client's first request may not have arrived),
    /// to close gracefully (GOAWAY: a request that races it is answered, or refused
    /// unprocessed for its client to send again on a new connection). Returns how
    /// many were asked.
    pub fn make_room(&self) -> usize {
        let listed = self.lock();
        let mut idle: Vec<&Listed> = listed
            .iter()
            .map(|(_, l)| l)
            .filter(|l| {
                l.answering.strong_count() == 1
                    && !l.closing.started.load(Ordering::Relaxed)
                    && l.listed_at.elapsed() >= YOUNGEST_CLOSED_FOR_ROOM
            })
            .collect();
        idle.sort_unstable_by_key(|l| l.listed_at);
        idle.truncate((idle.len() / 8).clamp(1, MOST_CLOSED_FOR_ROOM));
        let asked: Vec<Arc<Closing>> = idle
            .into_iter()
            .map(|l| {
                l.closing.started.store(true, Ordering::Relaxed);
                l.closing.clone()
            })
            .collect();
        drop(listed);
        // Woken outside the lock every connection takes as it opens and ends.
        for closing in &asked {
            closing.asked.notify_one();
        }
        self.closed_for_room.inc_by(asked.len() as u64);
        asked.len()
    }
}

/// What `h2` may buffer per stream (hyper's): with `prioritize` the connection's
/// budget bounds it.
const SEND_BUFFER: usize = 400 * 1024;

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
    let budget = prioritize.then(|| Arc::new(Budget::new(settings.http2.budget_bytes as usize)));
    let scheduler = Scheduler(budget.clone());
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(1024 * 1024)
        .initial_connection_window_size(1024 * 1024)
        .max_concurrent_streams(200)
        .max_send_buffer_size(SEND_BUFFER)
        .max_header_list_size(settings.max_header_list_size);
    let bound_below = (prioritize && conn.tls && settings.http2.tls_buffer_bytes != 0)
        .then_some(settings.http2.tls_buffer_bytes as usize);
    let io = Metered::new(io, budget, bound_below);
    let mut connection = match builder.handshake::<_, Bytes>(io).await {
        Ok(connection) => connection,
        Err(e) => return tracing::debug!(peer = %conn.peer, error = %e, "h2 handshake failed"),
    };
    let (dead, mut peer_dead) = tokio::sync::oneshot::channel::<()>();
    if let Some(ping_pong) = connection.ping_pong() {
        tokio::spawn(keep_alive(ping_pong, dead));
    }
    let mut idleness = Idleness::default();
    let listing = settings.connections.list(&idleness.answering);
    let mut stopping = *stop.borrow();
    if stopping {
        listing.closing();
        connection.graceful_shutdown();
    }
    // A check every `idle_timeout` closes the connection when it was idle since the
    // last (gracefully; at the next check at once if the client still holds it open:
    // h2 waits for the client to acknowledge a ping before it ends a graceful close).
    let mut closing_idle = false;
    let idle_timeout = Duration::from_millis(settings.http2.idle_timeout_ms);
    let mut idle_check =
        tokio::time::interval_at(tokio::time::Instant::now() + idle_timeout, idle_timeout);
    loop {
        tokio::select! {
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    let answering = idleness.arrived();
                    let (responder, scheduler) = (responder.clone(), scheduler.clone());
                    let mut answered =
                        Box::pin(answer(responder, request, respond, conn, scheduler, answering));
                    // A prepared answer is made and handed to `h2` in one go: here,
                    // without a task (and its hand-offs) of its own. The rest go on
                    // in one. A panic stays the stream's, as in a task of its own
                    // (dropped, its stream is reset).
                    let first = poll_fn(|cx| {
                        Poll::Ready(std::panic::catch_unwind(std::panic::AssertUnwindSafe(
                            || answered.as_mut().poll(cx),
                        )))
                    });
                    match first.await {
                        Ok(Poll::Ready(())) => {}
                        Ok(Poll::Pending) => {
                            tokio::spawn(answered);
                        }
                        Err(_) => tracing::error!(peer = %conn.peer, "an answer panicked; its stream is reset"),
                    }
                    // Many streams ready at once are answered in turns with the
                    // thread's other connections, as their tasks were.
                    tokio::task::consume_budget().await;
                }
                Some(Err(e)) => {
                    tracing::debug!(peer = %conn.peer, error = %e, "h2 connection ended");
                    return;
                }
                None => return,
            },
            changed = stop.changed(), if !stopping => {
                stopping = true;
                listing.closing();
                let _ = changed;
                connection.graceful_shutdown();
            }
            () = listing.asked_to_close(), if !stopping => {
                tracing::debug!(peer = %conn.peer, "h2 connection idle at the connection limit: closing");
                (stopping, closing_idle) = (true, true);
                connection.graceful_shutdown();
                // A client that stalls the graceful close is closed at once after
                // this, not an idle period later: its place is wanted now.
                idle_check.reset_after(PING_TIMEOUT);
            }
            _ = idle_check.tick(), if !stopping || closing_idle => {
                let idle = idleness.idle_since_last_check();
                if closing_idle && idle {
                    tracing::debug!(peer = %conn.peer, "h2 idle connection held open: closing");
                    connection.abrupt_shutdown(Reason::NO_ERROR);
                    let _ = tokio::time::timeout(PING_TIMEOUT, poll_fn(|cx| connection.poll_closed(cx))).await;
                    return;
                }
                if idle && !stopping {
                    tracing::debug!(peer = %conn.peer, "h2 connection idle: closing");
                    listing.closing();
                    (stopping, closing_idle) = (true, true);
                    connection.graceful_shutdown();
                }
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

/// Whether a connection was idle between two checks: no stream arrived and no answer
/// was being made.
#[derive(Default)]
struct Idleness {
    /// Held by each answer being made (this one's own reference aside).
    answering: Arc<()>,
    arrived: bool,
}

impl Idleness {
    /// A stream arrived: the token its answer holds while it is made.
    fn arrived(&mut self) -> Arc<()> {
        self.arrived = true;
        self.answering.clone()
    }

    fn idle_since_last_check(&mut self) -> bool {
        !std::mem::take(&mut self.arrived) && Arc::strong_count(&self.answering) == 1
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

/// A connection's order of responses: its [`Budget`] when `prioritize` is on; off,
/// every stream hands `h2` all it has at once.
#[derive(Clone)]
struct Scheduler(Option<Arc<Budget>>);

/// One stream's sending within its connection's budget.
struct Turn {
    budget: Arc<Budget>,
    stream: u32,
    priority: Priority,
}

impl Turn {
    fn new(budget: Arc<Budget>, stream: u32, priority: Priority) -> Self {
        budget.enter(stream, priority);
        Turn {
            budget,
            stream,
            priority,
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.budget.leave(self.stream);
    }
}

/// One stream: 103 Early Hints when the responder has any, then the response.
/// `answering` is held until the answer and its pushes end (the connection is not
/// idle meanwhile).
async fn answer<R: Responder>(
    responder: Arc<R>,
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    conn: ConnInfo,
    scheduler: Scheduler,
    answering: Arc<()>,
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
    if let Some(budget) = &scheduler.0 {
        budget.arrived(priority);
    }
    let Some(early_hints) = until_reset(&mut respond, responder.early_hints(&request, conn)).await
    else {
        return;
    };
    if let Some(fields) = early_hints {
        // For the debug line only: each link's target is in `<…>` (targets never hold
        // one unescaped).
        let links = tracing::enabled!(tracing::Level::DEBUG).then(|| {
            let bytes = fields.iter().flat_map(|(_, v)| v.as_bytes());
            bytes.filter(|&&b| b == b'<').count()
        });
        let mut early = Response::new(());
        *early.status_mut() = StatusCode::EARLY_HINTS;
        *early.headers_mut() = fields;
        match respond.send_informational(early) {
            Ok(()) => {
                tracing::debug!(peer = %conn.peer, path = uri.path(), links = links.unwrap_or_default(), "103 Early Hints sent")
            }
            Err(e) => tracing::debug!(error = %e, "103 Early Hints not sent"),
        }
    }
    // What a pushed request carries over from the page's: how the client decodes,
    // never who it is (a pushed response must be fit for anyone holding the page).
    let push_fields = push_request_fields(request.headers());
    let authority = request.uri().authority().cloned();
    let scheme = request.uri().scheme().cloned();
    let Some(response) = until_reset(&mut respond, responder.clone().respond(request, conn)).await
    else {
        return;
    };
    let (mut parts, body) = response.into_parts();
    fit_for_h2(&mut parts.headers);
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
                let mut request = promised.map(|()| body::empty());
                // As the client's own requests on this connection: an HTTP/2 request
                // names its authority in the target, not in a `Host` field.
                *request.version_mut() = http::Version::HTTP_2;
                let scheduler = scheduler.clone();
                let answering = answering.clone();
                tokio::spawn(push(
                    responder.clone(),
                    request,
                    pushed,
                    conn,
                    scheduler,
                    answering,
                ));
            }
            // The client turned push off (every browser) or the stream is gone: stop.
            Err(e) => {
                tracing::debug!(error = %e, "push refused");
                break;
            }
        }
    }
    if !end {
        send_body(send, body, &scheduler, priority).await;
    }
}

/// A stream's send half whose reset can be awaited: the client's (RST_STREAM), or
/// the connection's end.
trait Resettable {
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<Result<Reason, h2::Error>>;
}

impl Resettable for SendResponse<Bytes> {
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<Result<Reason, h2::Error>> {
        SendResponse::poll_reset(self, cx)
    }
}

impl Resettable for SendStream<Bytes> {
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<Result<Reason, h2::Error>> {
        SendStream::poll_reset(self, cx)
    }
}

impl Resettable for h2::server::SendPushedResponse<Bytes> {
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<Result<Reason, h2::Error>> {
        h2::server::SendPushedResponse::poll_reset(self, cx)
    }
}

/// `work`'s output, or `None` once the stream is reset or its connection ends: the
/// work is dropped then (an origin request, a store read, a body's next piece), as
/// hyper's server drops a reset stream's service future. A client that opens and
/// resets streams (CVE-2023-44487) so keeps no more requests in progress than `h2`'s
/// stream limits allow, and no answer is resumed after its connection ended (whose
/// socket number `ConnInfo` names and the kernel may give to another client). Work
/// ready at once (a prepared answer, a whole body) does not look at the stream.
async fn until_reset<T>(stream: &mut impl Resettable, work: impl Future<Output = T>) -> Option<T> {
    let mut work = std::pin::pin!(work);
    if let Poll::Ready(done) = poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await {
        return Some(done);
    }
    tokio::select! {
        // The reset first: after the connection's end the work is not resumed.
        biased;
        _ = poll_fn(|cx| stream.poll_reset(cx)) => None,
        done = work => Some(done),
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
    scheduler: Scheduler,
    _answering: Arc<()>,
) {
    let Some(response) = until_reset(&mut pushed, responder.respond(request, conn)).await else {
        return;
    };
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
    fit_for_h2(&mut parts.headers);
    let end = body.is_end_stream();
    match pushed.send_response(Response::from_parts(parts, ()), end) {
        Ok(send) if !end => {
            send_body(send, body, &scheduler, Priority::new(LEAST_URGENT, false)).await
        }
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "pushed response not sent"),
    }
}

/// What the connection layer does to a final response's fields, as hyper's servers
/// do on the other listeners: drops connection-specific ones and adds `Date` when
/// the response has none (RFC 9110 §6.6.1: an origin with a clock sends one, a
/// recipient forwarding a response without one adds it).
fn fit_for_h2(headers: &mut HeaderMap) {
    strip_connection_fields(headers);
    if !headers.contains_key(http::header::DATE) {
        if let Some(date) = date_now() {
            headers.insert(http::header::DATE, date);
        }
    }
}

/// The current `Date` value, formatted once a second per thread (always valid:
/// `httpdate` writes ASCII).
fn date_now() -> Option<http::HeaderValue> {
    thread_local! {
        static DATE: std::cell::RefCell<Option<(u64, http::HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    let now = std::time::SystemTime::now();
    let second = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    DATE.with_borrow_mut(|cached| match cached {
        Some((at, value)) if *at == second => Some(value.clone()),
        _ => {
            let value = http::HeaderValue::from_str(&httpdate::fmt_http_date(now)).ok()?;
            *cached = Some((second, value.clone()));
            Some(value)
        }
    })
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

/// Streams `body` (of `priority`) as the client's flow control and the connection's
/// scheduler allow; resets the stream with INTERNAL_ERROR when the body fails (the
/// client must not take a truncated body as whole), and stops when the client resets
/// it.
async fn send_body(
    mut send: SendStream<Bytes>,
    mut body: Body,
    scheduler: &Scheduler,
    priority: Priority,
) {
    let turn = scheduler
        .0
        .clone()
        .map(|budget| Turn::new(budget, send.stream_id().as_u32(), priority));
    loop {
        let Some(frame) = until_reset(&mut send, body.frame()).await else {
            return;
        };
        let sent = match frame {
            None => send.send_data(Bytes::new(), true),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "response body failed: resetting the stream");
                send.send_reset(Reason::INTERNAL_ERROR);
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                // An empty piece: nothing to send (an end is still to come).
                Ok(data) if data.is_empty() => continue,
                Ok(data) => {
                    // A whole body (a cached one) ends with its data: the last piece
                    // carries END_STREAM instead of an empty frame after it.
                    let end = body.is_end_stream();
                    let handed = match &turn {
                        Some(turn) => send_budgeted(&mut send, data, end, turn).await,
                        None => send_data(&mut send, data, end).await,
                    };
                    match handed {
                        Ok(()) if end => return,
                        Ok(()) => continue,
                        Err(e) => Err(e),
                    }
                }
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

/// Hands `data` (not empty) to `h2` in the pieces the send window grants; with `end`,
/// the last piece ends the stream.
async fn send_data(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), h2::Error> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = match poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => return Err(h2::Error::from(Reason::CANCEL)),
        };
        if granted > 0 {
            let piece = data.split_to(granted.min(data.len()));
            send.send_data(piece, end && data.is_empty())?;
        }
    }
    Ok(())
}

/// Hands `data` to `h2` in the pieces both the connection's budget and the send
/// window grant. Flow-control capacity is reserved only with room in the budget, and
/// waited for with none held: a stream whose client does not read holds neither the
/// budget nor more than a piece of the connection's window. With `end`, the last
/// piece ends the stream.
async fn send_budgeted(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    turn: &Turn,
) -> Result<(), h2::Error> {
    let (budget, stream) = (&turn.budget, turn.stream);
    let cancelled = || h2::Error::from(Reason::CANCEL);
    while !data.is_empty() {
        let room = budget
            .room(stream, turn.priority, data.len())
            .await
            .ok_or_else(cancelled)?;
        send.reserve_capacity(room);
        let capacity = send.capacity().min(room);
        if capacity == 0 {
            budget.give_back(stream, room);
            match poll_fn(|cx| send.poll_capacity(cx)).await {
                Some(granted) => granted.map(drop)?,
                None => return Err(cancelled()),
            }
            continue;
        }
        budget.give_back(stream, room - capacity);
        let piece = data.split_to(capacity);
        if let Err(e) = send.send_data(piece, end && data.is_empty()) {
            budget.give_back(stream, capacity);
            return Err(e);
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
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

    /// One DATA frame, `h2`'s default largest.
    const FRAME: usize = 16 * 1024;

    /// The `Date` a `/dated/` response carries from its responder (an origin's).
    const DATED: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

    /// Answers `/NAME/SIZE` with SIZE bytes at once; `/slow/SIZE` with one frame,
    /// then (when `release` is notified) the rest: an origin that takes its time;
    /// `/late/SIZE` with nothing until `release` is notified, then all of it;
    /// `/fail/SIZE` with SIZE bytes, then a failure.
    struct Bodies {
        release: Arc<tokio::sync::Notify>,
        /// `/late/` answers being made (their futures not yet dropped).
        late: Arc<AtomicUsize>,
    }

    /// Counts one answer being made while it lives.
    struct Making(Arc<AtomicUsize>);

    impl Making {
        fn new(count: &Arc<AtomicUsize>) -> Making {
            count.fetch_add(1, Ordering::SeqCst);
            Making(count.clone())
        }
    }

    impl Drop for Making {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
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
            let path = req.uri().path();
            if path.starts_with("/late/") {
                return Box::pin(async move {
                    let _making = Making::new(&self.late);
                    self.release.notified().await;
                    Response::new(body::full(whole))
                });
            }
            if path.starts_with("/panic/") {
                return Box::pin(async { panic!("a responder's bug") });
            }
            if path.starts_with("/dated/") {
                let mut response = Response::new(body::full(whole));
                let date = http::HeaderValue::from_static(DATED);
                response.headers_mut().insert(http::header::DATE, date);
                return Box::pin(async move { response });
            }
            if !path.starts_with("/slow/") && !path.starts_with("/fail/") {
                return Box::pin(async move { Response::new(body::full(whole)) });
            }
            let slow = path.starts_with("/slow/");
            let (tx, body) = body::channel(2);
            tokio::spawn(async move {
                let mut whole = whole;
                if slow {
                    let first = whole.split_to(FRAME);
                    tx.send(Ok(first)).await.unwrap();
                    self.release.notified().await;
                    tx.send(Ok(whole)).await.unwrap();
                } else {
                    tx.send(Ok(whole)).await.unwrap();
                    let _ = tx.send(Err("the origin failed".into())).await;
                }
            });
            Box::pin(async move { Response::new(body) })
        }
    }

    /// The client's end of the connection, noting each response's HEADERS and DATA
    /// frames (stream, DATA bytes) in the order they come off the wire: the server's
    /// bytes are frames, each a 9-byte header (length, type, flags, stream) and its
    /// payload. While `paused`, it reads nothing (a client that stopped reading).
    struct Wire<S> {
        inner: S,
        frames: Arc<Mutex<Vec<(u32, usize)>>>,
        header: Vec<u8>,
        payload_left: usize,
        paused: Arc<Pause>,
    }

    /// Whether a [`Wire`] reads, and who to wake when it may again.
    #[derive(Default)]
    struct Pause {
        on: AtomicBool,
        reader: Mutex<Option<std::task::Waker>>,
    }

    impl Pause {
        fn set(&self, on: bool) {
            self.on.store(on, Ordering::SeqCst);
            if let Some(reader) = self.reader.lock().unwrap().take() {
                reader.wake();
            }
        }
    }

    impl<S: AsyncRead + Unpin> AsyncRead for Wire<S> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            if self.paused.on.load(Ordering::SeqCst) {
                *self.paused.reader.lock().unwrap() = Some(cx.waker().clone());
                if self.paused.on.load(Ordering::SeqCst) {
                    return Poll::Pending;
                }
            }
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

    crate::first_bytes::write_through!(Wire);

    type Fields = &'static [(&'static str, &'static str)];

    /// A server on one end of an in-memory pipe of `pipe` bytes (the socket's
    /// buffers), an `h2` client on the other with the given windows.
    struct Connected {
        client: h2::client::SendRequest<Bytes>,
        frames: Arc<Mutex<Vec<(u32, usize)>>>,
        release: Arc<tokio::sync::Notify>,
        paused: Arc<Pause>,
        late: Arc<AtomicUsize>,
        /// The client's connection task: aborting it ends the connection.
        connection: tokio::task::JoinHandle<()>,
    }

    /// [`connect_alone`], then, with ordering on, a browser's connection: a request
    /// of another class than any test's first (the page's stylesheet), answered
    /// before the test begins, so that the budget binds (see [`Budget`]).
    async fn connect(
        http2: Http2Config,
        pipe: usize,
        stream_window: u32,
        connection_window: u32,
    ) -> Connected {
        let prioritize = http2.prioritize;
        let connected = connect_alone(http2, pipe, stream_window, connection_window).await;
        if prioritize {
            let (_, _, reader) = ask(&connected.client, "/opener/1024", STYLE).await;
            reader.await.unwrap();
        }
        connected
    }

    async fn connect_alone(
        http2: Http2Config,
        pipe: usize,
        stream_window: u32,
        connection_window: u32,
    ) -> Connected {
        let listed = Arc::new(Http2Connections::default());
        connect_listed(http2, pipe, stream_window, connection_window, listed).await
    }

    /// [`connect_alone`], the connection listed in `connections`.
    async fn connect_listed(
        http2: Http2Config,
        pipe: usize,
        stream_window: u32,
        connection_window: u32,
        connections: Arc<Http2Connections>,
    ) -> Connected {
        let (server_io, client_io) = tokio::io::duplex(pipe);
        let release = Arc::new(tokio::sync::Notify::new());
        let late = Arc::new(AtomicUsize::new(0));
        let responder = Arc::new(Bodies {
            release: release.clone(),
            late: late.clone(),
        });
        let settings = H2Settings {
            max_header_list_size: 64 * 1024,
            http2,
            connections,
        };
        let conn = ConnInfo {
            peer: ([127, 0, 0, 1], 1).into(),
            tls: true,
            socket: None,
        };
        let (stop_sender, stop) = watch::channel(false);
        tokio::spawn(async move {
            serve(server_io, settings, responder, conn, stop).await;
            drop(stop_sender);
        });
        let frames = Arc::new(Mutex::new(Vec::new()));
        let paused = Arc::new(Pause::default());
        let wire = Wire {
            inner: client_io,
            frames: frames.clone(),
            header: Vec::new(),
            payload_left: 0,
            paused: paused.clone(),
        };
        let (client, connection) = h2::client::Builder::new()
            .initial_window_size(stream_window)
            .initial_connection_window_size(connection_window)
            .handshake::<_, Bytes>(wire)
            .await
            .unwrap();
        let connection = tokio::spawn(async move {
            let _ = connection.await;
        });
        Connected {
            client,
            frames,
            release,
            paused,
            late,
            connection,
        }
    }

    /// Sends one request; its stream, a signal at its body's first bytes, and the
    /// body's reader (which checks the body whole).
    async fn ask(
        client: &h2::client::SendRequest<Bytes>,
        path: &'static str,
        fields: Fields,
    ) -> (
        u32,
        tokio::sync::oneshot::Receiver<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let mut request = Request::get(format!("https://localhost{path}"));
        for (name, value) in fields {
            request = request.header(*name, *value);
        }
        let mut client = client.clone().ready().await.unwrap();
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

    /// The `[http2]` section with responses ordered (the default).
    fn ordered() -> Http2Config {
        Http2Config::default()
    }

    /// The `[http2]` section with `h2`'s own order: frame by frame among all.
    fn unordered() -> Http2Config {
        Http2Config {
            prioritize: false,
            ..Http2Config::default()
        }
    }

    /// Asks for each of `early` (on one connection), waits until every one is
    /// streaming, then asks for `late`. Checks every body whole, and returns how many
    /// bytes of the others went on the wire between `late`'s response head and its
    /// last DATA frame. `/slow/` bodies are let go once every early one is complete.
    async fn bytes_beside_late(
        http2: Http2Config,
        early: &[(&'static str, Fields)],
        late: (&'static str, Fields),
    ) -> usize {
        let connected = connect(http2, 64 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024).await;
        let mut readers = Vec::new();
        for (path, fields) in early {
            let (_, streaming, reader) = ask(&connected.client, path, fields).await;
            streaming.await.unwrap();
            readers.push(reader);
        }
        let (late_stream, _, late_reader) = ask(&connected.client, late.0, late.1).await;
        for reader in readers {
            reader.await.unwrap();
        }
        connected.release.notify_one();
        late_reader.await.unwrap();
        let frames = connected.frames.lock().unwrap();
        beside(&frames, late_stream)
    }

    /// How many bytes of other streams' DATA went on the wire between `stream`'s
    /// response head and its last DATA frame.
    fn beside(frames: &[(u32, usize)], stream: u32) -> usize {
        let first = frames.iter().position(|f| f.0 == stream).unwrap();
        let last = frames.iter().rposition(|f| f.0 == stream).unwrap();
        frames[first..last]
            .iter()
            .filter(|f| f.0 != stream)
            .map(|f| f.1)
            .sum()
    }

    const IMAGE: Fields = &[("sec-fetch-dest", "image")];
    const PAGE: Fields = &[("sec-fetch-dest", "document")];
    const STYLE: Fields = &[("sec-fetch-dest", "style")];
    /// What may still go out of the streams ahead once a more urgent one has data:
    /// what they handed `h2` (the budget, one frame over at most) and the frame it
    /// is writing.
    fn leak() -> usize {
        Http2Config::default().budget_bytes as usize + 2 * FRAME
    }

    /// The sizes of `stream`'s frames as they came off the wire: its HEADERS (0),
    /// then each DATA frame's.
    fn frames_of(connected: &Connected, stream: u32) -> Vec<usize> {
        let frames = connected.frames.lock().unwrap();
        frames
            .iter()
            .filter(|f| f.0 == stream)
            .map(|f| f.1)
            .collect()
    }

    /// Waits (bounded) until `count` reads `expected`.
    async fn until_count(count: &AtomicUsize, expected: usize) {
        for _ in 0..400 {
            if count.load(Ordering::SeqCst) == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!(
            "{} answers being made, not {expected}",
            count.load(Ordering::SeqCst)
        );
    }

    /// A stream reset before its answer is made, by the client or by the connection's
    /// end, drops the making of it (rapid reset: nothing keeps running for streams
    /// the client has given up).
    #[tokio::test]
    async fn an_answer_is_not_made_for_a_stream_reset_or_a_connection_gone() {
        let connected = connect_alone(ordered(), 64 * 1024, 1 << 20, 1 << 20).await;
        let mut streams = Vec::new();
        for _ in 0..20 {
            let mut client = connected.client.clone().ready().await.unwrap();
            let request = Request::get("https://localhost/late/100").body(()).unwrap();
            let (_response, stream) = client.send_request(request, false).unwrap();
            streams.push(stream);
        }
        until_count(&connected.late, 20).await;
        for mut stream in streams.drain(..10) {
            stream.send_reset(Reason::CANCEL);
        }
        until_count(&connected.late, 10).await;
        connected.connection.abort();
        until_count(&connected.late, 0).await;
    }

    /// A connection is closed once a check finds it idle (no answer being made and no
    /// stream since the last one), never while an answer is being made.
    #[tokio::test]
    async fn an_idle_connection_is_closed_and_a_busy_one_kept() {
        let idle = Duration::from_millis(100);
        let http2 = Http2Config {
            idle_timeout_ms: 100,
            ..ordered()
        };
        let mut connected = connect_alone(http2, 64 * 1024, 1 << 20, 1 << 20).await;
        let (_, _, reader) = ask(&connected.client, "/late/100", PAGE).await;
        tokio::time::sleep(idle * 5).await;
        // No GOAWAY came meanwhile: another stream is answered.
        let (_, _, another) = ask(&connected.client, "/whole/100", PAGE).await;
        another.await.unwrap();
        connected.release.notify_one();
        reader.await.unwrap();
        tokio::time::timeout(idle * 50, &mut connected.connection)
            .await
            .expect("an idle connection stays open")
            .unwrap();
    }

    #[tokio::test]
    async fn at_the_connection_limit_a_connection_answering_nothing_is_closed() {
        let listed = Arc::new(Http2Connections::default());
        let connect = || connect_listed(ordered(), 64 * 1024, 1 << 20, 1 << 20, listed.clone());
        let (mut idle, mut busy) = (connect().await, connect().await);
        assert_eq!(listed.make_room(), 0, "none is old enough");
        tokio::time::sleep(YOUNGEST_CLOSED_FOR_ROOM).await;
        let (_, _, answered) = ask(&idle.client, "/whole/100", PAGE).await;
        answered.await.unwrap();
        let (_, _, waiting) = ask(&busy.client, "/late/100", PAGE).await;
        while busy.late.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(listed.make_room(), 1, "one answers nothing");
        tokio::time::timeout(Duration::from_secs(10), &mut idle.connection)
            .await
            .expect("the idle connection is closed")
            .unwrap();
        assert_eq!(listed.make_room(), 0, "none left answering nothing");
        assert_eq!(listed.closed_for_room.get(), 1);
        busy.release.notify_one();
        waiting.await.unwrap();
        assert!(!busy.connection.is_finished(), "the busy one is kept");
        assert_eq!(listed.make_room(), 1, "idle now");
        tokio::time::timeout(Duration::from_secs(10), &mut busy.connection)
            .await
            .expect("closed once idle")
            .unwrap();
        assert_eq!(listed.lock().len(), 0, "each left the list as it ended");
    }

    #[tokio::test]
    async fn a_panicking_answer_resets_its_stream_only() {
        let listed = Arc::new(Http2Connections::default());
        let connected =
            connect_listed(ordered(), 64 * 1024, 1 << 20, 1 << 20, listed.clone()).await;
        let request = Request::get("https://localhost/panic/1").body(()).unwrap();
        let (response, _) = connected
            .client
            .clone()
            .send_request(request, true)
            .unwrap();
        assert!(response.await.is_err(), "its stream is reset");
        let (_, _, reader) = ask(&connected.client, "/whole/100", PAGE).await;
        reader.await.unwrap();
        assert!(
            !connected.connection.is_finished(),
            "the connection goes on"
        );
        tokio::time::sleep(YOUNGEST_CLOSED_FOR_ROOM).await;
        assert_eq!(listed.make_room(), 1, "the panicked answer held nothing");
    }

    #[tokio::test]
    async fn a_whole_body_ends_its_stream_with_its_last_data_frame() {
        for http2 in [ordered(), unordered()] {
            let connected = connect(http2, 64 * 1024, 1 << 20, 1 << 20).await;
            let (stream, _, reader) = ask(&connected.client, "/whole/40000", PAGE).await;
            reader.await.unwrap();
            // No empty DATA frame after the body to end the stream.
            assert_eq!(
                frames_of(&connected, stream),
                [0, FRAME, FRAME, 40000 - 2 * FRAME]
            );
            // A body that streams ends when it says so: an empty frame after it.
            let (stream, streaming, reader) = ask(&connected.client, "/slow/20000", PAGE).await;
            streaming.await.unwrap();
            connected.release.notify_one();
            reader.await.unwrap();
            assert_eq!(frames_of(&connected, stream), [0, FRAME, 20000 - FRAME, 0]);
        }
    }

    #[tokio::test]
    async fn the_page_goes_out_before_the_images_asked_for_earlier() {
        let images: [(&str, Fields); 4] = [
            ("/i1/2097152", IMAGE),
            ("/i2/2097152", IMAGE),
            ("/i3/2097152", IMAGE),
            ("/i4/2097152", IMAGE),
        ];
        let page = ("/page/262144", PAGE);
        let beside = bytes_beside_late(ordered(), &images, page).await;
        assert!(beside <= leak(), "{beside} bytes of images within the page");
        // Without ordering, frame by frame: the page shares the wire.
        let unordered = bytes_beside_late(unordered(), &images, page).await;
        assert!(unordered > 4 * leak(), "{unordered}");
    }

    #[tokio::test]
    async fn a_late_page_goes_ahead_of_what_ten_images_have_queued() {
        // The 103's preloads over a slow link: ten images have all they can queued
        // below the server's order when the page's body is ready (the client reads
        // nothing meanwhile). Within the budget, what they handed `h2` is bounded
        // per connection, not per stream.
        let connected = connect(ordered(), 64 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024).await;
        connected.paused.set(true);
        let mut readers = Vec::new();
        for image in 0..10 {
            let path: &'static str = Box::leak(format!("/i{image}/1048576").into_boxed_str());
            readers.push(ask(&connected.client, path, IMAGE).await.2);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (page, _, page_reader) = ask(&connected.client, "/page/131072", PAGE).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        connected.paused.set(false);
        page_reader.await.unwrap();
        for reader in readers {
            reader.await.unwrap();
        }
        let beside = beside(&connected.frames.lock().unwrap().clone(), page);
        assert!(beside <= leak(), "{beside} bytes of images within the page");
    }

    /// Asks for `first` then `second` while the client reads nothing, then reads
    /// both: how many of `second`'s bytes went out while `first` was being sent.
    async fn second_within_first(
        connected: Connected,
        first: (&'static str, Fields),
        second: (&'static str, Fields),
    ) -> usize {
        connected.paused.set(true);
        let (first_stream, _, first_reader) = ask(&connected.client, first.0, first.1).await;
        let (_, _, second_reader) = ask(&connected.client, second.0, second.1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        connected.paused.set(false);
        first_reader.await.unwrap();
        second_reader.await.unwrap();
        let frames = connected.frames.lock().unwrap().clone();
        beside(&frames, first_stream)
    }

    #[tokio::test]
    async fn equal_urgencies_go_one_after_another_unless_incremental() {
        // RFC 9218's default (no `i`): only a whole response is of use, so the one
        // asked for first goes out whole first.
        let sequential = second_within_first(
            connect(ordered(), 64 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024).await,
            ("/a/262144", IMAGE),
            ("/b/262144", IMAGE),
        )
        .await;
        assert!(
            sequential <= leak(),
            "{sequential} bytes of the second within the first"
        );
        // Incremental ones take turns.
        const INCREMENTAL: Fields = &[("sec-fetch-dest", "image"), ("priority", "u=3, i")];
        let shared = second_within_first(
            connect(ordered(), 64 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024).await,
            ("/a/262144", INCREMENTAL),
            ("/b/262144", INCREMENTAL),
        )
        .await;
        assert!(shared > 4 * leak(), "{shared}");
    }

    #[tokio::test]
    async fn every_response_carries_a_date_and_keeps_its_own() {
        let connected = connect_alone(unordered(), 64 * 1024, 65_535, 65_535).await;
        for (path, own) in [("/plain/10", None), ("/dated/10", Some(DATED))] {
            let mut client = connected.client.clone().ready().await.unwrap();
            let request = Request::get(format!("https://localhost{path}")).body(());
            let (response, _) = client.send_request(request.unwrap(), true).unwrap();
            let response = response.await.unwrap();
            let date = response.headers().get_all(http::header::DATE);
            assert_eq!(date.iter().count(), 1, "{path}");
            let date = date.iter().next().unwrap().to_str().unwrap();
            match own {
                Some(own) => assert_eq!(date, own),
                None => {
                    let sent = httpdate::parse_http_date(date).unwrap();
                    let off = std::time::SystemTime::now().duration_since(sent).unwrap();
                    assert!(off < Duration::from_secs(5), "{date}");
                }
            }
        }
    }

    /// A browser's fresh connection: the page first, then (the client reading
    /// nothing meanwhile) its images; how many image bytes went out within the page.
    async fn images_within_a_page_asked_first(page: &'static str, late: bool) -> usize {
        let connected =
            connect_alone(ordered(), 64 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024).await;
        connected.paused.set(true);
        let (page, _, page_reader) = ask(&connected.client, page, PAGE).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut readers = Vec::new();
        for path in ["/i1/1048576", "/i2/1048576", "/i3/1048576"] {
            readers.push(ask(&connected.client, path, IMAGE).await.2);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        if late {
            connected.release.notify_one();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        connected.paused.set(false);
        page_reader.await.unwrap();
        for reader in readers {
            reader.await.unwrap();
        }
        let frames = connected.frames.lock().unwrap().clone();
        beside(&frames, page)
    }

    #[tokio::test]
    async fn a_page_answered_at_once_stays_ahead_of_the_images_asked_after_it() {
        // What the page handed `h2` before the images came counts against them.
        let beside = images_within_a_page_asked_first("/page/262144", false).await;
        assert!(beside <= leak(), "{beside} bytes of images within the page");
    }

    #[tokio::test]
    async fn a_page_waiting_for_its_origin_counts_as_a_class_before_its_images_send() {
        // The 103 case: the page's request has arrived, its head has not; the images
        // it preloads are held to the budget, so the page's body goes ahead of theirs.
        let beside = images_within_a_page_asked_first("/late/262144", true).await;
        assert!(beside <= leak(), "{beside} bytes of images within the page");
    }

    #[tokio::test]
    async fn a_connection_of_one_class_hands_h2_each_response_whole() {
        // No other class to put ahead: the two go frame by frame, as without
        // ordering, each handed to `h2` at once instead of a piece per write.
        let alone = connect_alone(ordered(), 64 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024);
        let shared =
            second_within_first(alone.await, ("/a/262144", IMAGE), ("/b/262144", IMAGE)).await;
        assert!(shared > 4 * leak(), "{shared}");
    }

    #[tokio::test]
    async fn the_priority_field_wins_over_the_destination() {
        const LOW_PAGE: Fields = &[("sec-fetch-dest", "document"), ("priority", "u=5")];
        const URGENT_IMAGE: Fields = &[("sec-fetch-dest", "image"), ("priority", "u=0")];
        let beside = bytes_beside_late(
            ordered(),
            &[("/page/4194304", LOW_PAGE)],
            ("/img/262144", URGENT_IMAGE),
        )
        .await;
        assert!(
            beside <= leak(),
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
        let beside = bytes_beside_late(ordered(), &images, ("/page/262144", PAGE)).await;
        assert!(beside <= leak(), "{beside} bytes of images within the page");
    }

    #[tokio::test]
    async fn a_page_waiting_for_its_origin_holds_nothing_back() {
        // The page's rest comes only once the images are complete: were they held
        // back while it waits, this would never end.
        let images: [(&str, Fields); 2] = [("/i1/1048576", IMAGE), ("/i2/1048576", IMAGE)];
        let waited = tokio::time::timeout(
            Duration::from_secs(60),
            bytes_beside_late(ordered(), &images, ("/slow/262144", PAGE)),
        )
        .await;
        let beside = waited.expect("the images were held back by a page with nothing to send");
        assert!(beside > 0);
    }

    #[tokio::test]
    async fn a_budget_below_a_frame_sends_past_a_stream_the_client_does_not_read() {
        // 64 KiB stream windows, 256 KiB for the connection: the unread stream takes
        // its window and a quarter of the connection's, and waits for more with none
        // of the budget.
        let http2 = Http2Config {
            budget_bytes: 1,
            ..ordered()
        };
        let connected = connect(http2, 64 * 1024, 65_535, 256 * 1024).await;
        let mut request = Request::get("https://localhost/stuck/1048576");
        request = request.header("sec-fetch-dest", "document");
        let mut client = connected.client.clone().ready().await.unwrap();
        let (unread, _) = client
            .send_request(request.body(()).unwrap(), true)
            .unwrap();
        let unread = unread.await.unwrap();
        let mut readers = Vec::new();
        for (path, fields) in [("/a/1048576", IMAGE), ("/b/1048576", IMAGE)] {
            readers.push(ask(&connected.client, path, fields).await.2);
        }
        let read = async {
            for reader in readers {
                reader.await.unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .expect("a stream without window held the others back");
        drop(unread);
    }

    #[tokio::test]
    async fn a_reset_stream_gives_back_what_it_had_handed_h2() {
        // The client reads nothing while a response hands `h2` 48 KiB and fails: `h2`
        // drops what it had not written (16 KiB fit the pipe), which must not stay
        // counted against the budget (8 KiB).
        let connected = connect(ordered(), 16 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024).await;
        connected.paused.set(true);
        let mut client = connected.client.clone().ready().await.unwrap();
        let (failing, _) = client
            .send_request(
                Request::get("https://localhost/fail/49152")
                    .body(())
                    .unwrap(),
                true,
            )
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        connected.paused.set(false);
        let _ = failing.await;
        let (_, _, reader) = ask(&connected.client, "/after/262144", PAGE).await;
        tokio::time::timeout(Duration::from_secs(30), reader)
            .await
            .expect("the reset stream's bytes kept the budget full")
            .unwrap();
    }

    #[test]
    fn queue_bounds_are_checked_each_by_its_key() {
        let keys = |http2: Http2Config| -> Vec<String> {
            http2
                .problems()
                .iter()
                .map(|problem| problem.to_string())
                .collect()
        };
        assert!(keys(Http2Config::default()).is_empty());
        let zeros = Http2Config {
            budget_bytes: 0,
            tls_buffer_bytes: 0,
            unsent_bytes: 0,
            ..Http2Config::default()
        };
        let problems = keys(zeros);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("http2.budget_bytes"), "{problems:?}");
        let instant = Http2Config {
            idle_timeout_ms: 999,
            ..Http2Config::default()
        };
        assert!(keys(instant)[0].contains("http2.idle_timeout_ms"));
        let huge = Http2Config {
            budget_bytes: u32::MAX,
            tls_buffer_bytes: 1,
            unsent_bytes: 5 * 1024 * 1024,
            ..Http2Config::default()
        };
        let problems = keys(huge);
        for key in ["budget_bytes", "tls_buffer_bytes", "unsent_bytes"] {
            assert!(
                problems.iter().any(|p| p.contains(key)),
                "{key}: {problems:?}"
            );
        }
    }

    /// CPU time of the calling thread so far (`/proc/thread-self/schedstat`).
    fn thread_cpu() -> Duration {
        let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
        let nanos = schedstat
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        Duration::from_nanos(nanos)
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_leaves_the_server_idle() {
        // One thread runs server and client alike: a server busy waiting for room
        // would keep it busy.
        let connected = connect(ordered(), 64 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024).await;
        let mut readers = Vec::new();
        for path in ["/x1/4194304", "/x2/4194304", "/x3/4194304"] {
            let (_, streaming, reader) = ask(&connected.client, path, IMAGE).await;
            streaming.await.unwrap();
            readers.push(reader);
        }
        connected.paused.set(true);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = thread_cpu();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let spent = thread_cpu() - before;
        assert!(
            spent < Duration::from_millis(100),
            "{spent:?} of CPU in 1 s"
        );
        connected.paused.set(false);
        for reader in readers {
            reader.await.unwrap();
        }
    }
}
