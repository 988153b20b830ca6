//! One browser request: answered from a fresh held instance, or over the link —
//! the link request, its frames, verification, keeping the instance, the answer.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{
    HeaderValue, ACCEPT_ENCODING, AGE, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, RANGE,
    TRANSFER_ENCODING, VIA,
};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use store::Hash;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::caching::{reuse, Reuse};
use wirefold_http::conditional::{evaluate, last_modified, EntityTag, Precondition};
use wirefold_http::hop_by_hop::remove_hop_by_hop;

use crate::connection::LinkError;
use crate::frames::{feed, Frames, FramesError};
use crate::instances::{may_keep, Received};
use crate::metrics::{Answered, Pushed};
use crate::push::{Promised, Receiver};
use crate::Client;
use link_protocol::frame::{self, Frame};
use link_protocol::reassemble::{
    referenced_instance, Current, Delivery, Outcome, ReassembleError, Reassembler,
};
use proxy::body::error_response;
use proxy::body::{self, Body, IdleTimeout};
use proxy::pipeline::respond::not_modified;

/// What the client proxy adds to `Via`, towards the server proxy and the browser.
pub const VIA_VALUE: &str = "1.1 wirefold-client";

/// Chunks of a streamed full body in flight to the browser.
const STREAM_CHUNKS: usize = 4;

/// A browser's request, ready to go over the link (perhaps twice).
struct Proxied {
    method: Method,
    target: Uri,
    /// End-to-end fields: hop-by-hop, `Host`, `Accept-Encoding` and `wirefold-*` removed.
    fields: HeaderMap,
    body: Bytes,
}

impl Proxied {
    fn url(&self) -> String {
        self.target.to_string()
    }
    fn idempotent(&self) -> bool {
        self.method == Method::GET || self.method == Method::HEAD
    }
    /// Only a GET or HEAD without a body may be answered from a held instance: a
    /// body may change the answer, and it is part of no key.
    fn may_use_instances(&self) -> bool {
        self.idempotent() && self.body.is_empty()
    }
    /// Only a GET's answer may be kept: a HEAD's instance comes without its body.
    fn may_keep_instance(&self) -> bool {
        self.method == Method::GET && self.may_use_instances()
    }
    /// A GET for a page, as a browser navigates (`Sec-Fetch-Dest: document`) or any
    /// client accepting HTML: the requests whose answers may come with pushes.
    fn asks_for_a_page(&self) -> bool {
        let field = |name: &str| {
            self.fields
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
        };
        self.method == Method::GET
            && self.body.is_empty()
            && (field("sec-fetch-dest") == "document" || field("accept").contains("text/html"))
    }
    /// The method on the link: a HEAD goes as a GET, because an HTTP/2 response to
    /// HEAD cannot carry a body, and so no frames (RFC 9113 §8.1.1; the h2 crate
    /// resets such a stream). The browser still gets only the head.
    fn link_method(&self) -> Method {
        if self.method == Method::HEAD {
            Method::GET
        } else {
            self.method.clone()
        }
    }
}

/// How one attempt over the link ended.
enum Attempt {
    Answer(Response<Body>),
    /// The instance did not verify: worth one more request for the full instance.
    Unverified(String),
    /// The link failed under the request.
    LinkFailed(String),
}

/// Answers a request for the absolute `target`.
pub async fn answer(client: &Client, req: Request<Incoming>, target: Uri) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, client.config.max_body_bytes)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            client.metrics.answered(Answered::Error);
            let status = if e.is::<http_body_util::LengthLimitError>() {
                StatusCode::PAYLOAD_TOO_LARGE
            } else {
                StatusCode::BAD_REQUEST
            };
            return finish(
                client,
                error_response(status, &format!("request body: {e}")),
            );
        }
    };
    let mut fields = parts.headers;
    remove_hop_by_hop(&mut fields);
    fields.remove(HOST);
    fields.remove(ACCEPT_ENCODING);
    // The link's own fields are the client proxy's to set, never a browser's.
    for name in [
        frame::LINK_HEADER,
        frame::HAVE_HEADER,
        frame::WANT_HEADER,
        frame::METHOD_HEADER,
        frame::PUSH_HEADER,
        frame::HELD_HEADER,
    ] {
        fields.remove(name);
    }
    let request = Proxied {
        method: parts.method,
        target,
        fields,
        body,
    };
    if request.may_use_instances() {
        // What is being pushed is waited for, then found held: no second transfer.
        let bound = Duration::from_millis(client.config.response_idle_timeout_ms);
        client.pushes.wait_for(&request.url(), bound).await;
    }
    if let Some(response) = local_fresh(client, &request).await {
        client.metrics.answered(Answered::LocalFresh);
        return finish(client, response);
    }
    let response = over_the_link(client, &request).await;
    finish(client, response)
}

/// A held instance fresh enough for the request, per RFC 9111.
async fn local_fresh(client: &Client, request: &Proxied) -> Option<Response<Body>> {
    if !request.may_use_instances()
        || request.fields.contains_key(AUTHORIZATION)
        || request.fields.contains_key(RANGE)
    {
        return None;
    }
    let instances = client.instances.clone();
    let url = request.url();
    let held = tokio::task::spawn_blocking(move || instances.newest(&url))
        .await
        .ok()??;
    let fields = held.fields();
    if proxy::cache::secondary_key(&fields, &request.fields).as_ref() != Some(&held.secondary_key) {
        return None;
    }
    let freshness = held.freshness();
    let now = SystemTime::now();
    let decision = reuse(
        &freshness,
        &CacheControl::from_headers(&fields),
        &CacheControl::from_headers(&request.fields),
        now,
    );
    if decision != Reuse::Fresh {
        return None;
    }
    let hash = held.hash()?;
    let instances = client.instances.clone();
    let body = tokio::task::spawn_blocking(move || instances.body(&hash))
        .await
        .ok()??;
    if let Some(response) = preconditions(request, StatusCode::OK, &fields) {
        return Some(response);
    }
    let mut response =
        browser_response(StatusCode::OK, fields, body, request.method == Method::HEAD);
    let age = freshness.current_age(now).as_secs();
    response.headers_mut().insert(AGE, HeaderValue::from(age));
    Some(response)
}

/// Asks the server proxy: once more for the full instance after a verification
/// failure, and once more on a new connection after a link failure (GET and HEAD).
async fn over_the_link(client: &Client, request: &Proxied) -> Response<Body> {
    let mut want_full = false;
    let mut link_retried = false;
    loop {
        // Only safe requests offer instances: an unsafe one is never sent twice, so
        // it must not depend on a base that might fail verification.
        let offer = if want_full || !request.idempotent() {
            Vec::new()
        } else {
            let instances = client.instances.clone();
            let url = request.url();
            tokio::task::spawn_blocking(move || instances.offer(&url))
                .await
                .unwrap_or_default()
        };
        let push = if client.config.accept_push && request.asks_for_a_page() {
            let held = if client.config.announce_held {
                let instances = client.instances.clone();
                let url = request.url();
                tokio::task::spawn_blocking(move || instances.held_for_origin(&url))
                    .await
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            Some(held)
        } else {
            None
        };
        let asked = Asked {
            offer: &offer,
            want_full,
            push: push.as_deref(),
        };
        match attempt(client, request, &asked).await {
            Attempt::Answer(response) => return response,
            Attempt::Unverified(reason) => {
                client.metrics.verification_failures.inc();
                tracing::warn!(url = %request.target, %reason, "discarded an instance that failed verification");
                if want_full {
                    client.metrics.answered(Answered::Error);
                    return error_response(
                        StatusCode::BAD_GATEWAY,
                        &format!("the server proxy's full instance failed verification: {reason}"),
                    );
                }
                if !request.idempotent() {
                    client.metrics.answered(Answered::Error);
                    return error_response(
                        StatusCode::BAD_GATEWAY,
                        &format!(
                            "the server proxy's answer failed verification: {reason} \
                             (a {} is not sent again)",
                            request.method
                        ),
                    );
                }
                want_full = true;
            }
            Attempt::LinkFailed(reason) if request.idempotent() && !link_retried => {
                tracing::info!(url = %request.target, %reason, "link failed; retrying on a new connection");
                link_retried = true;
            }
            Attempt::LinkFailed(reason) => {
                client.metrics.answered(Answered::Error);
                return error_response(
                    StatusCode::BAD_GATEWAY,
                    &format!("link to the server proxy failed: {reason}"),
                );
            }
        }
    }
}

/// What one attempt asks of the server proxy besides the browser's request.
struct Asked<'a> {
    /// Instances offered as bases (`wirefold-have`).
    offer: &'a [Hash],
    want_full: bool,
    /// `Some` when pushes are accepted with the answer (a page request), with the
    /// instances held for its origin to announce (`wirefold-held`).
    push: Option<&'a [Hash]>,
}

async fn attempt(client: &Client, request: &Proxied, asked: &Asked<'_>) -> Attempt {
    let connection = match client.link.connection().await {
        Ok(c) => c,
        Err(e) => return Attempt::LinkFailed(e.to_string()),
    };
    let idle = Duration::from_millis(client.config.response_idle_timeout_ms);
    let sent = connection
        .sender
        .clone()
        .send_request(link_request(client, request, asked));
    let response = match tokio::time::timeout(idle, sent).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            client.link.discard(connection.generation).await;
            return Attempt::LinkFailed(e.to_string());
        }
        Err(_) => {
            client.link.discard(connection.generation).await;
            return Attempt::LinkFailed(LinkError::Timeout(idle).to_string());
        }
    };
    if response.status() != StatusCode::OK {
        client.metrics.answered(Answered::Error);
        return Attempt::Answer(refused(response).await);
    }
    let content_type = response.headers().get(CONTENT_TYPE);
    let essence = content_type
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim());
    if !essence.is_some_and(|e| e.eq_ignore_ascii_case(frame::CONTENT_TYPE)) {
        client.metrics.answered(Answered::Error);
        let named = content_type.map_or_else(
            || "no content-type".to_string(),
            |v| format!("content-type `{}`", String::from_utf8_lossy(v.as_bytes())),
        );
        return Attempt::Answer(error_response(
            StatusCode::BAD_GATEWAY,
            &format!(
                "the server proxy's 200 answer has {named}, not {}: not a link answer",
                frame::CONTENT_TYPE
            ),
        ));
    }
    let body = body::boxed(IdleTimeout::new(response.into_body(), idle));
    let mut frames = Frames::new(body, client.metrics.clone());
    match read_outcome(client, request, asked, &mut frames).await {
        Read::Done(attempt) => attempt,
        Read::Delivered(response, None) => Attempt::Answer(response),
        Read::Delivered(response, Some(promised)) => {
            let receiver = Receiver {
                instances: client.instances.clone(),
                metrics: client.metrics.clone(),
                limit: client.config.max_body_bytes,
            };
            tokio::spawn(receiver.receive(promised, frames));
            Attempt::Answer(response)
        }
        Read::Stream(reassembler) => stream_full_body(client, request, reassembler, frames),
        Read::LinkFailed(reason) => {
            client.link.discard(connection.generation).await;
            Attempt::LinkFailed(reason)
        }
    }
}

fn link_request(client: &Client, request: &Proxied, asked: &Asked<'_>) -> Request<Full<Bytes>> {
    let mut link = Request::new(Full::new(request.body.clone()));
    *link.method_mut() = request.link_method();
    *link.uri_mut() = request.target.clone();
    *link.version_mut() = http::Version::HTTP_2;
    let fields = link.headers_mut();
    *fields = request.fields.clone();
    fields.insert(frame::LINK_HEADER, client.link_value.clone());
    if request.method == Method::HEAD {
        // The server answers with the head and no body.
        fields.insert(frame::METHOD_HEADER, HeaderValue::from_static("HEAD"));
    }
    if !asked.offer.is_empty() {
        let have: Vec<String> = asked.offer.iter().map(Hash::to_hex).collect();
        #[allow(
            clippy::expect_used,
            reason = "hex joined by commas and spaces is a valid field value"
        )]
        fields.insert(
            frame::HAVE_HEADER,
            HeaderValue::from_str(&have.join(", ")).expect("hex is a valid header value"),
        );
    }
    if asked.want_full {
        fields.insert(frame::WANT_HEADER, HeaderValue::from_static("full"));
    }
    if let Some(held) = asked.push {
        fields.insert(frame::PUSH_HEADER, HeaderValue::from_static("1"));
        if !held.is_empty() {
            let prefixes: Vec<String> = held
                .iter()
                .take(frame::MAX_HELD)
                .map(|hash| format!("{:016x}", frame::held_prefix(hash)))
                .collect();
            #[allow(
                clippy::expect_used,
                reason = "hex joined by commas is a valid field value"
            )]
            fields.insert(
                frame::HELD_HEADER,
                HeaderValue::from_str(&prefixes.join(",")).expect("hex is a valid header value"),
            );
        }
    }
    fields.append(VIA, HeaderValue::from_static(VIA_VALUE));
    link
}

/// A link answer other than 200: the server proxy refused the request as a whole.
async fn refused(response: Response<Incoming>) -> Response<Body> {
    let status = response.status();
    let text = match Limited::new(response.into_body(), 4096).collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes())
            .trim()
            .to_string(),
        Err(_) => String::new(),
    };
    error_response(
        StatusCode::BAD_GATEWAY,
        &format!("the server proxy refused the link request: {status} {text}"),
    )
}

enum Read {
    Done(Attempt),
    /// The instance, verified, answers the browser; pushes may follow on the stream.
    Delivered(Response<Body>, Option<Promised>),
    /// A full body longer than the buffer limit: stream the rest.
    Stream(Box<Reassembler>),
    LinkFailed(String),
}

async fn read_outcome(
    client: &Client,
    request: &Proxied,
    asked: &Asked<'_>,
    frames: &mut Frames,
) -> Read {
    let offer = asked.offer;
    // The pushes promised with this answer, when accepted; a PROMISE refused (not
    // asked for, a second one, after HEADERS, another origin) drops them all.
    let mut promised: Option<Promised> = None;
    let mut promise_refused = false;
    let limit = client.config.max_body_bytes;
    let mut reassembler = Box::new(Reassembler::new(limit));
    let mut held: HashMap<Hash, Bytes> = HashMap::new();
    // Offered instances gone from the store since (evicted).
    let mut gone: Vec<Hash> = Vec::new();
    let request_time = SystemTime::now();
    loop {
        let frame = match frames.next().await {
            Ok(Some(frame)) => frame,
            // Reaching the outcome ends the reading: the response ended before it.
            Ok(None) => {
                return Read::Done(malformed(client, &ReassembleError::Incomplete.to_string()));
            }
            Err(FramesError::Frame(e)) => return Read::Done(malformed(client, &e.to_string())),
            Err(FramesError::Link(reason)) => return Read::LinkFailed(reason),
        };
        if let Frame::Promise { urls } = &frame {
            let acceptable = asked.push.is_some()
                && promised.is_none()
                && !promise_refused
                && reassembler.head().is_none();
            promised = acceptable
                .then(|| client.pushes.promise(&request.target, urls))
                .flatten();
            if promised.is_none() {
                promise_refused = true;
                client.metrics.pushed(Pushed::Refused, urls.len());
                tracing::warn!(url = %request.target, "refused a PROMISE out of place or naming another origin");
            }
            continue;
        }
        // Only instances this request offered may be named; load them off the reactor.
        let referenced = referenced_instance(&frame);
        if let Some(hash) = referenced {
            if offer.contains(&hash) && !held.contains_key(&hash) && !gone.contains(&hash) {
                let instances = client.instances.clone();
                match tokio::task::spawn_blocking(move || instances.body(&hash)).await {
                    Ok(Some(body)) => {
                        held.insert(hash, body);
                    }
                    _ => gone.push(hash),
                }
            }
        }
        let result;
        (result, reassembler) = feed(reassembler, frame, &held).await;
        match result {
            Ok(None) if reassembler.in_full_body() && reassembler.unverified_len() > limit => {
                return Read::Stream(reassembler);
            }
            Ok(None) => {}
            Ok(Some(Outcome::Error { status, message })) => {
                client.metrics.answered(Answered::Error);
                return Read::Done(Attempt::Answer(error_response(status, &message)));
            }
            Ok(Some(Outcome::Current(current))) => {
                let response = deliver(client, request, current, request_time).await;
                return Read::Delivered(response, promised);
            }
            Err(e) if e.is_verification_failure() => {
                return Read::Done(Attempt::Unverified(e.to_string()))
            }
            // The server named an instance this request offered, but it was evicted
            // since: like a failed verification, worth one request for the full one.
            Err(
                e @ (ReassembleError::UnknownInstance(_)
                | ReassembleError::BaseTooShort { .. }
                | ReassembleError::StaleIncomplete { .. }),
            ) if referenced.is_some_and(|h| gone.contains(&h)) => {
                return Read::Done(Attempt::Unverified(format!(
                    "an offered instance is no longer held: {e}"
                )))
            }
            Err(e) => return Read::Done(malformed(client, &e.to_string())),
        }
    }
}

fn malformed(client: &Client, reason: &str) -> Attempt {
    client.metrics.answered(Answered::Error);
    Attempt::Answer(error_response(
        StatusCode::BAD_GATEWAY,
        &format!("the server proxy's answer was unusable: {reason}"),
    ))
}

/// Keeps a verified instance when it may be shared, and answers the browser with it.
async fn deliver(
    client: &Client,
    request: &Proxied,
    current: Current,
    request_time: SystemTime,
) -> Response<Body> {
    client.metrics.answered(match current.delivery {
        Delivery::Confirm => Answered::Confirm,
        Delivery::Delta => Answered::Delta,
        Delivery::Full => Answered::Full,
    });
    if request.may_keep_instance()
        && may_keep(
            &request.link_method(),
            &request.fields,
            current.status,
            &current.fields,
        )
    {
        if let Some(secondary_key) = proxy::cache::secondary_key(&current.fields, &request.fields) {
            let instances = client.instances.clone();
            let url = request.url();
            let body = current.body.clone();
            let fields = current.fields.clone();
            // Kept before answering, so the browser's next request finds it.
            let kept = tokio::task::spawn_blocking(move || {
                instances.keep(Received {
                    url: &url,
                    body: &body,
                    fields: &fields,
                    secondary_key,
                    request_time,
                    response_time: SystemTime::now(),
                })
            })
            .await;
            if let Ok(Err(e)) = kept {
                tracing::warn!(error = %e, url = %request.target, "could not keep an instance");
            }
        }
    }
    if let Some(response) = preconditions(request, current.status, &current.fields) {
        return response;
    }
    browser_response(
        current.status,
        current.fields,
        current.body,
        request.method == Method::HEAD,
    )
}

/// The browser's own preconditions against the instance about to be served (RFC 9110
/// §13.2.2): `304` with its validators or `412`, as the server pipeline answers them.
/// Only a GET's or HEAD's `200` is a selected representation to compare with; an
/// unsafe request's preconditions were the origin's to evaluate.
fn preconditions(
    request: &Proxied,
    status: StatusCode,
    fields: &HeaderMap,
) -> Option<Response<Body>> {
    if !request.idempotent() || status != StatusCode::OK {
        return None;
    }
    match evaluate(
        &request.method,
        &request.fields,
        EntityTag::from_headers(fields).as_ref(),
        last_modified(fields),
    ) {
        Precondition::Proceed => None,
        Precondition::NotModified => Some(not_modified(fields, None)),
        Precondition::Failed => Some(error_response(
            StatusCode::PRECONDITION_FAILED,
            "precondition failed",
        )),
    }
}

/// Sends the head now and the rest of a long full body as it arrives; the body ends
/// with an error (never normally) unless END verifies all of it.
fn stream_full_body(
    client: &Client,
    request: &Proxied,
    mut reassembler: Box<Reassembler>,
    mut frames: Frames,
) -> Attempt {
    // The reassembler admits a full body only after HEADERS.
    let Some((status, fields)) = reassembler
        .head()
        .map(|(status, fields)| (status, fields.clone()))
    else {
        return malformed(client, "a full body before HEADERS");
    };
    if let Some(response) = preconditions(request, status, &fields) {
        client.metrics.answered(Answered::Full);
        // The rest of the body is not needed: the stream is dropped.
        return Attempt::Answer(response);
    }
    let (tx, streamed) = body::channel(STREAM_CHUNKS);
    let metrics = client.metrics.clone();
    let first = reassembler.take_unverified();
    // From here a frame is decoded in steps of this many bytes, each sent before the
    // next is decoded: however much one frame decodes to, little of it is in memory.
    reassembler.set_output_bound(frame::MAX_PAYLOAD);
    tokio::spawn(async move {
        let held = HashMap::new();
        let mut chunk = first;
        let failure = loop {
            if !chunk.is_empty() && tx.send(Ok(chunk)).await.is_err() {
                return; // the browser went away
            }
            if reassembler.has_pending() {
                match reassembler.resume() {
                    Ok(()) => {
                        chunk = reassembler.take_unverified();
                        continue;
                    }
                    Err(e) => break e.to_string(),
                }
            }
            let frame = match frames.next().await {
                Ok(Some(frame)) => frame,
                Ok(None) => break "the link response ended before its outcome".to_string(),
                Err(e) => break e.to_string(),
            };
            match reassembler.push(frame, &held) {
                Ok(None) => chunk = reassembler.take_unverified(),
                Ok(Some(Outcome::Current(current))) => {
                    metrics.answered(Answered::Full);
                    if !current.body.is_empty() {
                        let _ = tx.send(Ok(current.body)).await;
                    }
                    return;
                }
                Ok(Some(Outcome::Error { message, .. })) => break message,
                Err(e) => {
                    if e.is_verification_failure() {
                        metrics.verification_failures.inc();
                    }
                    break e.to_string();
                }
            }
        };
        metrics.answered(Answered::Error);
        tracing::warn!(reason = %failure, "a streamed full body failed; aborting it");
        let _ = tx.send(Err(failure.into())).await;
    });
    let mut response = Response::new(streamed);
    *response.status_mut() = status;
    *response.headers_mut() = fields;
    clean_head(response.headers_mut());
    Attempt::Answer(response)
}

/// The browser's answer: HEADERS' status and fields, the instance's length.
fn browser_response(
    status: StatusCode,
    fields: HeaderMap,
    instance: Bytes,
    head_only: bool,
) -> Response<Body> {
    let length = instance.len();
    // A HEAD over the link gets an empty instance; HEADERS may carry the
    // representation's length in Content-Length, which the browser then gets.
    let head_length = fields
        .get(CONTENT_LENGTH)
        .filter(|v| v.to_str().is_ok_and(|s| s.parse::<u64>().is_ok()))
        .cloned();
    let mut response = Response::new(if head_only {
        body::empty()
    } else {
        body::full(instance)
    });
    *response.status_mut() = status;
    *response.headers_mut() = fields;
    clean_head(response.headers_mut());
    let length = match (head_only && length == 0, head_length) {
        (false, _) => Some(HeaderValue::from(length)),
        (true, from_headers) => from_headers,
    };
    if let Some(length) = length {
        response.headers_mut().insert(CONTENT_LENGTH, length);
    }
    response
}

/// Fields the client proxy sets itself, or that describe another hop. A
/// `Content-Encoding` in HEADERS stays: the server proxy sends it only when it could
/// not decode the origin's coding, and then the instance is those coded bytes.
fn clean_head(fields: &mut HeaderMap) {
    remove_hop_by_hop(fields);
    fields.remove(CONTENT_LENGTH);
    fields.remove(TRANSFER_ENCODING);
}

/// Every answer to a browser: `Via`, and its body counted.
fn finish(client: &Client, response: Response<Body>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    parts
        .headers
        .append(VIA, HeaderValue::from_static(VIA_VALUE));
    let metrics = client.metrics.clone();
    let body = body::counted(body, move |sent| {
        metrics.browser_bytes_delivered.inc_by(sent.bytes);
    });
    Response::from_parts(parts, body)
}
