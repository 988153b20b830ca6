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
//! Push: a response carrying [`PushPromises`](crate::pipeline::hint::PushPromises)
//! (the hint stage's, with `hints.push` on) gets a PUSH_PROMISE per resource right
//! after its head; each promised request (the page's codings, none of its
//! credentials) is answered through the responder like any request, and pushed when
//! it is a complete cacheable 200. A client that turned push off (every browser)
//! refuses the first promise and no more are tried; one that already holds a pushed
//! resource resets its stream, which stops the body.

use std::future::poll_fn;
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
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use crate::body::{self, Body, BoxError};
use crate::model::ConnInfo;

/// What the listener needs per connection.
pub struct H2Settings {
    pub max_header_list_size: u32,
}

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
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(1024 * 1024)
        .initial_connection_window_size(1024 * 1024)
        .max_concurrent_streams(200)
        .max_send_buffer_size(400 * 1024)
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
                    tokio::spawn(answer(responder.clone(), request, respond, conn));
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

/// One stream: 103 Early Hints when the responder has any, then the response.
async fn answer<R: Responder>(
    responder: Arc<R>,
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    conn: ConnInfo,
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
                tokio::spawn(push(responder.clone(), request, pushed, conn));
            }
            // The client turned push off (every browser) or the stream is gone: stop.
            Err(e) => {
                tracing::debug!(error = %e, "push refused");
                break;
            }
        }
    }
    if !end {
        send_body(send, body).await;
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
        Ok(send) if !end => send_body(send, body).await,
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

/// Streams `body` as the client's flow control allows; resets the stream with
/// INTERNAL_ERROR when the body fails (the client must not take a truncated body as
/// whole), and stops when the client resets it.
async fn send_body(mut send: SendStream<Bytes>, mut body: Body) {
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = poll_fn(|cx| send.poll_reset(cx)) => return,
        };
        let sent = match frame {
            None => send.send_data(Bytes::new(), true),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "response body failed: resetting the stream");
                send.send_reset(Reason::INTERNAL_ERROR);
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => match send_data(&mut send, data).await {
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

/// Sends `data` in the pieces the send window grants.
async fn send_data(send: &mut SendStream<Bytes>, mut data: Bytes) -> Result<(), h2::Error> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
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
