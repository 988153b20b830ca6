//! The server proxy's end of the link: answers one link request with a frame
//! sequence. The states follow Banga, Douglis & Rabinovich (1997, Table 1):
//!
//! | client holds | server holds | origin says | sent |
//! | --- | --- | --- | --- |
//! | the current instance | — | unchanged | CONFIRM |
//! | an older instance | — | changed | DELTA against it (or FULL if not smaller) |
//! | nothing of this URL | an instance | — | its STALE stream at once, while the origin is asked; then CONFIRM, or DELTA against it (all or the prefix sent), or FULL |
//! | nothing | nothing | — | FULL (zstd) |
//!
//! Beyond the prototype: several instances per URL and cluster serve as bases
//! (the client names what it holds), instances of uncacheable pages are kept as
//! bases, the stale stream stops as soon as finishing it plus the delta would cost
//! more than the alternatives, and per-host origin waits skip optimism that cannot pay.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use codec::cost::NetworkPath;
use codec::dictionary::DictionaryCoding;
use codec::Encoder;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use store::Hash;
use tokio::sync::watch;
use wirefold_http::audience::audience;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::ContentCoding;

use crate::ending::{best_ending, content_type, link_fields, Ending};
use crate::levels;
use crate::push::{self, PushRequest};
use crate::stale::StaleStream;
use crate::waits::OriginWaits;
use crate::Stopped;
use crate::{together, FrameSender};
use delta::{blocking, dictionaries, history};
use delta::{now_unix, record_version};
use link_protocol::frame::{self, DeltaFormat, Frame, LinkCoding, OversizedFrame};
use proxy::body::error_response;
use proxy::body::{self, Body};
use proxy::decode::Windows;
use proxy::model::{
    ConnInfo, Instance, InstanceBody, OriginEvent, OriginObserver, Provenance, RequestContext,
    StreamCoding, CLIENT_CLOSED,
};
use proxy::pipeline::{fetch, remember, Pipeline};
use proxy::record::{Delivery, RequestRecord};
use proxy::recorder::OpenRecord;
use proxy::server::LinkEndpoint;

/// A text body's typical compressed share, for estimates before measuring.
const TYPICAL_RATIO: f64 = 0.2;

/// The server proxy's end of the link: the pipeline it runs exchanges through, and
/// the state the link keeps beside it.
pub struct LinkServer {
    pipeline: Arc<Pipeline>,
    waits: OriginWaits,
    writes: PendingWrites,
}

impl LinkServer {
    pub fn new(pipeline: Arc<Pipeline>) -> Self {
        LinkServer {
            pipeline,
            waits: OriginWaits::default(),
            writes: PendingWrites::default(),
        }
    }
}

impl LinkEndpoint for LinkServer {
    fn accepted(&self, socket: std::os::fd::RawFd) {
        crate::limit_unsent(socket);
    }

    fn serve(
        self: Arc<Self>,
        req: Request<Body>,
        conn: ConnInfo,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response<Body>> + Send>> {
        Box::pin(async move { handle(&self, req, conn).await })
    }
}

/// Sends what the origin's answer does as it arrives to the exchange watching it.
/// Unbounded, yet bounded: `fetch` observes only bodies it reads whole (at most
/// `limits.max_buffered_body`), and the exchange drains the channel while it waits.
struct OriginWatchSender(tokio::sync::mpsc::UnboundedSender<OriginEvent>);

impl OriginObserver for OriginWatchSender {
    fn observe(&self, event: OriginEvent) {
        let _ = self.0.send(event);
    }
}

/// Store writes still running after their answer went out, per resource: the next
/// request for the resource waits for them, so it builds on what the last one kept.
#[derive(Default)]
struct PendingWrites {
    running: Mutex<HashMap<String, watch::Receiver<()>>>,
}

/// The longest a request waits for an earlier request's store writes.
const WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl PendingWrites {
    /// The writes running. Each use is one `get`, `insert` or `remove` (after a
    /// `get`), so a panic elsewhere cannot leave the map half-updated: a poisoned lock
    /// is taken over as it is (a guard is also dropped while unwinding, where a panic
    /// would abort).
    fn running(&self) -> MutexGuard<'_, HashMap<String, watch::Receiver<()>>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks writes for `resource` as running until the returned guard drops.
    fn begin(&self, resource: &str) -> PendingWrite<'_> {
        let (done, running) = watch::channel(());
        self.running().insert(resource.to_string(), running.clone());
        PendingWrite {
            writes: self,
            resource: resource.to_string(),
            running,
            _done: done,
        }
    }

    async fn wait_for(&self, resource: &str) {
        let running = self.running().get(resource).cloned();
        if let Some(mut running) = running {
            // Ends when the writer's sender drops (an error) or the wait is over.
            let _ = tokio::time::timeout(WRITE_WAIT, running.changed()).await;
        }
    }
}

struct PendingWrite<'a> {
    writes: &'a PendingWrites,
    resource: String,
    running: watch::Receiver<()>,
    _done: watch::Sender<()>,
}

impl Drop for PendingWrite<'_> {
    fn drop(&mut self) {
        let mut map = self.writes.running();
        if map
            .get(&self.resource)
            .is_some_and(|r| r.same_channel(&self.running))
        {
            map.remove(&self.resource);
        }
    }
}

/// Answers a link request: a `200` whose body is the frame sequence, produced by a
/// task so that frames flow while the origin is consulted. Requests refused as a
/// whole get an ordinary error response. The request's record has the status the
/// browser gets, the frame bytes sent, and `link-` and how the answer ended as its
/// mechanism.
pub async fn handle(
    server: &Arc<LinkServer>,
    mut req: Request<Body>,
    conn: ConnInfo,
) -> Response<Body> {
    let p = &server.pipeline;
    let started = Instant::now();
    let method = req.method().clone();
    let record = OpenRecord::new(
        RequestRecord::arriving(&req, conn),
        started,
        p.records.clone(),
    );
    let refuse = |status: StatusCode, message: &str| {
        p.metrics.record_request(&method, status, started.elapsed());
        record.deliver(Delivery::error(None));
        record.watch(error_response(status, message))
    };
    let config = p.config();
    let config = &config.link;
    if let Some(token) = &config.token {
        let presented = req.headers().get(frame::LINK_HEADER).map(|v| v.as_bytes());
        if !presented.is_some_and(|p| proxy::secret::same_secret(p, token.as_bytes())) {
            return refuse(StatusCode::FORBIDDEN, "wrong or missing link token");
        }
    }
    let have = match parse_have(req.headers()) {
        Ok(have) => have,
        Err(message) => return refuse(StatusCode::BAD_REQUEST, &message),
    };
    let push = match PushRequest::from_headers(req.headers()) {
        Ok(push) => push,
        Err(message) => return refuse(StatusCode::BAD_REQUEST, &message),
    };
    match req
        .headers()
        .get(frame::METHOD_HEADER)
        .map(|v| v.as_bytes())
    {
        None => {}
        Some(b"HEAD") if req.method() == Method::GET => *req.method_mut() = Method::HEAD,
        Some(_) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "wirefold-method may only turn a GET into HEAD",
            )
        }
    }
    let want_full = req
        .headers()
        .get(frame::WANT_HEADER)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"full"));
    let headers = req.headers_mut();
    for name in [
        frame::LINK_HEADER,
        frame::HAVE_HEADER,
        frame::WANT_HEADER,
        frame::METHOD_HEADER,
        frame::PUSH_HEADER,
        frame::HELD_HEADER,
    ] {
        headers.remove(name);
    }
    // Codings on the link are the pair's business; the origin is asked for its own.
    headers.remove(header::ACCEPT_ENCODING);
    let ctx = match p.context(&req, conn, started) {
        Ok(ctx) => ctx,
        Err(message) => return refuse(StatusCode::BAD_REQUEST, &message),
    };
    let measured = proxy::record::LinkSample::measure(conn.socket);
    let link = levels::link_for(measured, config.assumed_bandwidth_bps);
    record.update(|r| {
        r.resource = Some(ctx.resource.clone());
        r.link = measured;
    });
    let (tx, body) = body::channel(1);
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(frame::CONTENT_TYPE),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Watched before the exchange starts, so its status (the browser's) is the last word.
    let response = record.watch(response);
    let exchange = Exchange {
        p: p.clone(),
        server: server.clone(),
        ctx,
        have: if want_full { Vec::new() } else { have },
        want_full,
        push,
        link,
        tx: FrameSender::new(
            tx,
            std::time::Duration::from_millis(config.idle_client_timeout_ms),
        ),
        status: Arc::default(),
        record,
    };
    tokio::spawn(async move {
        let (p, status) = (exchange.p.clone(), exchange.status.clone());
        let (tx, record) = (exchange.tx.clone(), exchange.record.clone());
        let status = match exchange.run(req).await {
            Ok(()) => StatusCode::from_u16(status.load(Ordering::Relaxed)).unwrap_or(CLIENT_CLOSED),
            Err(Stopped::Gone) => {
                tracing::debug!("client proxy went away mid-response");
                CLIENT_CLOSED
            }
            Err(Stopped::Oversized(oversized)) => {
                tracing::warn!(error = %oversized, "a link answer does not fit its frames");
                fail_oversized(&p, &record, &tx, &oversized)
                    .await
                    .unwrap_or(CLIENT_CLOSED)
            }
        };
        p.metrics.record_request(&method, status, started.elapsed());
        record.update(|r| r.status = status);
    });
    response
}

/// How a link answer ended, for the metrics and the request's record: `original` is
/// the instance's decoded length when all of it reached the client proxy.
fn record_ending(p: &Pipeline, record: &OpenRecord, outcome: &'static str, original: Option<u64>) {
    p.metrics.link_outcome(outcome);
    record.update(|r| r.mechanism = Some(Cow::Owned(format!("link-{outcome}"))));
    record.set_original_len(original);
}

/// Ends an exchange whose answer does not fit the link with a 502 ERROR (ERROR may
/// follow any frame); the status the browser gets, `None` if it did not get through.
async fn fail_oversized(
    p: &Pipeline,
    record: &OpenRecord,
    tx: &FrameSender,
    oversized: &OversizedFrame,
) -> Option<StatusCode> {
    record_ending(p, record, "error", None);
    let status = StatusCode::BAD_GATEWAY;
    let error = Frame::Error {
        status,
        message: oversized.to_string(),
    };
    // An ERROR's message is cut to 4 KiB: it always fits.
    tx.send(error.encode().ok()?).await.ok()?;
    Some(status)
}

/// `wirefold-have`: SHA-256 hex values, comma separated, at most [`frame::MAX_HAVE`].
fn parse_have(headers: &HeaderMap) -> Result<Vec<Hash>, String> {
    let mut have = Vec::new();
    for value in headers.get_all(frame::HAVE_HEADER) {
        let text = value
            .to_str()
            .map_err(|_| "wirefold-have is not ASCII".to_string())?;
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let hash = item
                .parse::<Hash>()
                .map_err(|_| format!("wirefold-have: `{item}` is not a SHA-256 hex value"))?;
            have.push(hash);
        }
    }
    if have.len() > frame::MAX_HAVE {
        return Err(format!(
            "wirefold-have names {} instances; at most {} are allowed",
            have.len(),
            frame::MAX_HAVE
        ));
    }
    Ok(have)
}

struct Exchange {
    p: Arc<Pipeline>,
    server: Arc<LinkServer>,
    ctx: RequestContext,
    have: Vec<Hash>,
    want_full: bool,
    /// The client proxy accepts pushes with a page's answer (`wirefold-push`).
    push: Option<PushRequest>,
    link: NetworkPath,
    tx: FrameSender,
    /// The status sent in HEADERS, for the request metrics.
    status: Arc<AtomicU16>,
    /// The request's record, completed as the exchange and its frames end.
    record: OpenRecord,
}

impl Exchange {
    async fn run(mut self, req: Request<Body>) -> Result<(), Stopped> {
        let (p, server) = (self.p.clone(), self.server.clone());
        let (tx, link) = (self.tx.clone(), self.link);
        self.server.writes.wait_for(&self.ctx.resource).await;
        let mut stale = self.stale_candidate().await;
        // With a stale stream going, watch the origin's answer arrive.
        let (tap, mut tapped) = tokio::sync::mpsc::unbounded_channel();
        let observer: Option<Arc<dyn OriginObserver>> = stale
            .is_some()
            .then(|| Arc::new(OriginWatchSender(tap)) as Arc<dyn OriginObserver>);
        let mut watch = OriginWatch::default();
        let started = Instant::now();
        let fetched = 'fetched: {
            let fetch = fetch::fetch(&p.fetcher, &self.ctx, req, observer.as_ref());
            tokio::pin!(fetch);
            // Without a stale stream nothing taps the origin's answer: it is awaited.
            let Some(stale) = stale.as_mut() else {
                break 'fetched fetch.await;
            };
            loop {
                let cut_due = watch.cut_due();
                let far = Instant::now() + std::time::Duration::from_secs(3600);
                tokio::select! {
                    biased;
                    fetched = &mut fetch => break fetched,
                    _ = tokio::time::sleep_until(cut_due.unwrap_or(far).into()), if cut_due.is_some() => {
                        self.start_cut_through(&mut watch, stale).await;
                    }
                    // Cut-through frames go out as the link takes them, while the
                    // origin's answer keeps being read.
                    permit = self.tx.reserve(), if watch.cut.as_ref().is_some_and(|c| !c.outbox.is_empty()) => {
                        let permit = permit?;
                        if let Some(cut) = watch.cut.as_mut() {
                            permit.send(Ok(together(cut.outbox.drain(..))));
                        }
                    }
                    Some(event) = tapped.recv() => {
                        self.watch_origin(&mut watch, event, stale).await;
                    }
                    sent = stale.send_next(&self.tx), if watch.cut.is_none() && !stale.complete() => sent?,
                }
            }
        };
        drop(tapped);
        self.record.update(|r| {
            r.origin_wait = self.ctx.origin_wait.get();
            r.cache = fetched.as_ref().ok().map(|f| f.instance.provenance);
        });
        let fetched = match fetched {
            Ok(fetched) => fetched,
            Err(response) => {
                // A failed or timed-out origin made us wait too: optimism may pay there.
                if matches!(
                    response.status(),
                    StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT
                ) {
                    self.server.waits.record(&self.ctx.site, started.elapsed());
                }
                if watch.cut.is_some() {
                    let message = format!(
                        "the origin's answer failed after it began: {}",
                        response.status()
                    );
                    return self.fail(StatusCode::BAD_GATEWAY, &message).await;
                }
                return self.relay_error(response).await;
            }
        };
        if matches!(
            fetched.instance.provenance,
            Provenance::Fetched { .. } | Provenance::Revalidated { .. } | Provenance::Bypass
        ) {
            self.server.waits.record(&self.ctx.site, started.elapsed());
        }
        let base = self.base_to_keep(&fetched.instance);
        match whole_copy(&fetched.instance) {
            // The store writes (fsynced) need not delay the answer: the copy goes out
            // while `remember` writes. A request arriving before the writes land finds
            // less to build on, never anything wrong.
            Some(instance) => {
                let writing = server.writes.begin(&self.ctx.resource);
                // Promised before the page's HEADERS, so the client proxy knows what
                // is coming before the browser asks for it. Not while cutting
                // through: that HEADERS may already be out.
                let promising = match self.push.take() {
                    Some(asked) if watch.cut.is_none() => {
                        push::promise(&p, &self.ctx, asked, &instance)
                    }
                    _ => None,
                };
                let promised = match promising {
                    Some(promising) => promising.await,
                    None => None,
                };
                if let Some(promised) = &promised {
                    self.send_together([promised.frame().encode()?]).await?;
                }
                let answer = async {
                    if let Some(base) = base {
                        self.keep_base(base).await;
                    }
                    match watch.cut {
                        Some(cut) => self.finish_cut_through(cut, instance).await,
                        None => self.answer(instance, stale).await,
                    }
                };
                let remember = async {
                    remember::remember(&p.cache, &p.deltas, &p.metrics, fetched).await;
                    drop(writing);
                };
                let (_, answered) = tokio::join!(remember, answer);
                answered?;
                if let Some(promised) = promised {
                    promised.send(&p, &tx, link).await;
                }
                Ok(())
            }
            None => {
                let instance = remember::remember(&p.cache, &p.deltas, &p.metrics, fetched).await;
                match watch.cut.take() {
                    Some(cut) => self.resume_cut_through(cut, watch, instance).await,
                    None => self.answer(instance, stale).await,
                }
            }
        }
    }

    /// Follows the origin's answer as `fetch` reads it. When a new 200 differs from
    /// the stale instance in its first half (and shares little with it), the stale
    /// stream stops and the new data goes to the client as it arrives (FULL),
    /// instead of after the whole body (docs/link-protocol.md).
    async fn watch_origin(&self, watch: &mut OriginWatch, event: OriginEvent, stale: &StaleStream) {
        let data = match event {
            OriginEvent::Head {
                status,
                fields,
                decode,
                length,
            } => {
                // Only a new 200 replaces the stale 200; anything else may yet be
                // replaced by a stored copy (stale-if-error) once it is in.
                if status != StatusCode::OK {
                    return watch.settle();
                }
                let limit = self.p.config().limits.max_decoded_body;
                watch.decoder = decode.map(|coding| Windows::new(coding, limit));
                watch.head = Some((status, fields));
                watch.length = length;
                return;
            }
            OriginEvent::End => {
                watch.ended = true;
                return;
            }
            OriginEvent::Data(_) if watch.settled => return,
            OriginEvent::Data(data) => data,
        };
        watch.coded += data.len() as u64;
        watch.first_data.get_or_insert_with(Instant::now);
        if watch.decoder.is_none() {
            return self.watch_decoded(watch, data, stale).await;
        }
        // A chunk may decode to far more than itself: it is followed window by window.
        let mut rest = &data[..];
        while let Some(windows) = watch.decoder.as_mut() {
            match windows.next(&mut rest) {
                Ok(Some(window)) => self.watch_decoded(watch, window.into(), stale).await,
                Ok(None) => return,
                // A body that fails to decode fails in `fetch` too (or, streamed, in
                // the cut-through resumed with this decoder, which keeps the error).
                Err(_) => return,
            }
        }
    }

    /// Compares decoded bytes of the new instance with the stale one, or feeds them
    /// to the cut-through under way.
    async fn watch_decoded(&self, watch: &mut OriginWatch, decoded: Bytes, stale: &StaleStream) {
        if watch.settled {
            return;
        }
        if let Some(cut) = watch.cut.as_mut() {
            return cut.feed(decoded).await;
        }
        watch.received.extend_from_slice(&decoded);
        if watch.received.len() > self.p.config().limits.max_buffered_body {
            // Larger than any body read whole: the watch holds no more of it.
            return watch.settle();
        }
        let stale_bytes = &stale.bytes[..];
        let common = watch.received.len().min(stale_bytes.len());
        let diverged = (watch.compared..common).find(|&i| watch.received[i] != stale_bytes[i]);
        watch.compared = common;
        watch.diverged_early |= diverged.is_some_and(|at| at < stale_bytes.len() / 2);
        if !watch.diverged_early && watch.compared >= stale_bytes.len() / 2 {
            // The first half is the same: no early divergence can come any more.
            return watch.settle();
        }
        if watch.cut_due().is_some_and(|due| Instant::now() >= due) {
            self.start_cut_through(watch, stale).await;
        }
    }

    /// Stops the stale stream for good and queues the new instance's head and what
    /// has arrived of it so far; the rest follows as it comes.
    async fn start_cut_through(&self, watch: &mut OriginWatch, stale: &StaleStream) {
        if stale.complete() {
            return watch.settle(); // all of it is with the client: a delta will do
        }
        let Some((status, fields)) = watch.head.take() else {
            return watch.settle();
        };
        let received = Bytes::from(std::mem::take(&mut watch.received));
        let (arrived, old) = (received.clone(), stale.bytes.clone());
        let unlike = blocking::run(move || shares_little(&arrived, &old)).await;
        if !unlike {
            // A small edit early on (a nonce, a date): the delta chosen once the
            // answer is in will be small.
            return watch.settle();
        }
        let level = levels::levels(self.link, stale.bytes.len() as u64).stream;
        let cut = self
            .head(status, fields)
            .and_then(|head| FullStream::new(Some(head), level));
        let Ok(mut cut) = cut else {
            // Fields the link cannot carry: the answer fails on them once it is in.
            return watch.settle();
        };
        cut.feed(received).await;
        watch.cut = Some(cut);
    }

    /// Ends a cut-through with the rest of the instance `fetch` read whole, then END.
    async fn finish_cut_through(
        self,
        mut cut: FullStream,
        instance: Instance,
    ) -> Result<(), Stopped> {
        let changed = "the origin's answer changed under us";
        let InstanceBody::Whole { bytes, hash } = instance.body else {
            unreachable!("a whole copy")
        };
        // `fetch` may hand on another instance than the one that began arriving (a
        // stored copy, under stale-if-error): what went out cannot be taken back.
        if cut.fed > bytes.len() as u64 {
            return self.fail(StatusCode::BAD_GATEWAY, changed).await;
        }
        cut.feed(bytes.slice(cut.fed as usize..)).await;
        if cut.hash() != hash {
            return self.fail(StatusCode::BAD_GATEWAY, changed).await;
        }
        self.end_full(cut, "cut-through").await
    }

    /// Ends a cut-through of a body of undeclared length that outgrew the buffer:
    /// it streams on from where the watch left off.
    async fn resume_cut_through(
        self,
        cut: FullStream,
        watch: OriginWatch,
        instance: Instance,
    ) -> Result<(), Stopped> {
        match instance.body {
            // The body starts again from its first byte; the watch has decoded and
            // fed the first `watch.coded` of them.
            InstanceBody::Stream { body, .. } => {
                self.pump_full(cut, body, watch.decoder, watch.coded, "cut-through")
                    .await
            }
            _ => {
                let changed = "the origin's answer changed under us";
                self.fail(StatusCode::BAD_GATEWAY, changed).await
            }
        }
    }

    /// The newest instance of this URL the server holds, when the client holds none
    /// of its instances and the origin's wait has been long enough to pay.
    async fn stale_candidate(&self) -> Option<StaleStream> {
        let config = self.p.config();
        let config = &config.link;
        let min_wait = std::time::Duration::from_millis(config.min_origin_wait_ms);
        if self.want_full
            || !config.optimistic
            || self.ctx.profile.method != Method::GET
            || self.ctx.profile.has_authorization
            || !self
                .server
                .waits
                .worth_sending_stale(&self.ctx.site, min_wait)
        {
            return None;
        }
        let store = self.p.store().cloned()?;
        let resource = self.ctx.resource.clone();
        let have = self.have.clone();
        let found = tokio::task::spawn_blocking(move || {
            let versions = history::load(&store, &resource).ok()?.versions;
            if versions
                .iter()
                .any(|v| v.hash().is_some_and(|h| have.contains(&h)))
            {
                return None; // the client holds an instance: a delta against it is cheaper
            }
            let hash = versions.first()?.hash()?;
            Some((hash, store.get_blob(&hash).ok()??))
        })
        .await
        .ok()??;
        let (hash, bytes) = found;
        let level = levels::levels(self.link, bytes.len() as u64).stream;
        Some(StaleStream::new(
            hash,
            bytes,
            config.stale_chunk_bytes,
            level,
        ))
    }

    async fn answer(self, instance: Instance, stale: Option<StaleStream>) -> Result<(), Stopped> {
        let status = instance.status;
        let mut fields = link_fields(&instance);
        if self.ctx.profile.method == Method::HEAD {
            // The representation's length, and no body: nothing to verify.
            if let InstanceBody::Whole { bytes, .. } = &instance.body {
                fields.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            }
            return self.send_empty(status, fields).await;
        }
        fields.remove(header::CONTENT_LENGTH);
        match instance.body {
            InstanceBody::Whole { bytes, hash } => {
                self.answer_whole(status, fields, (bytes, hash, instance.origin_coded), stale)
                    .await
            }
            InstanceBody::Stream { body, coding, .. } => {
                let decode = match coding {
                    StreamCoding::Identity => None,
                    StreamCoding::Known(coding) => Some(coding),
                    // Not decodable here: the coded bytes are the instance, labelled as such.
                    StreamCoding::Unknown(value) => {
                        fields.insert(header::CONTENT_ENCODING, value);
                        None
                    }
                };
                let head = self.head(status, fields)?;
                self.stream_full(Some(head), body, decode, "full-stream")
                    .await
            }
            InstanceBody::File { file, len } => {
                let (head, body) = (self.head(status, fields)?, body::file(file, 0, len));
                self.stream_full(Some(head), body, None, "full-stream")
                    .await
            }
            InstanceBody::Empty => self.send_empty(status, fields).await,
        }
    }

    /// HEADERS, then an empty FULL body.
    async fn send_empty(&self, status: StatusCode, fields: HeaderMap) -> Result<(), Stopped> {
        record_ending(&self.p, &self.record, "empty", Some(0));
        let full = Frame::Full {
            coding: LinkCoding::Identity,
        };
        let end = Frame::End {
            hash: Hash::of(b""),
            length: 0,
        };
        self.send_together([self.head(status, fields)?, full.encode()?, end.encode()?])
            .await
    }

    async fn answer_whole(
        self,
        status: StatusCode,
        fields: HeaderMap,
        (bytes, hash, origin_coded): (Bytes, Hash, Option<(ContentCoding, Bytes)>),
        mut stale: Option<StaleStream>,
    ) -> Result<(), Stopped> {
        let metrics = &self.p.metrics;
        let content_type = content_type(&fields);
        if self.have.contains(&hash) {
            self.send_together([
                self.head(status, fields)?,
                Frame::Confirm { hash }.encode()?,
            ])
            .await?;
            record_ending(&self.p, &self.record, "confirm", Some(bytes.len() as u64));
            metrics.record_body("link-confirm", content_type, bytes.len() as u64, 0);
            return Ok(());
        }
        if let Some(s) = stale.as_mut().filter(|s| s.hash == hash) {
            s.finish(&self.tx).await?;
            self.send_together([
                self.head(status, fields)?,
                Frame::Confirm { hash }.encode()?,
            ])
            .await?;
            record_ending(
                &self.p,
                &self.record,
                "stale-confirmed",
                Some(bytes.len() as u64),
            );
            metrics.record_body(
                "link-stale-confirmed",
                content_type,
                bytes.len() as u64,
                s.sent_coded as u64,
            );
            return Ok(());
        }
        let held = self.held_base().await;
        let stale_view = stale.as_ref().map(|s| {
            (
                s.bytes.clone(),
                s.sent,
                s.remaining_coded(TYPICAL_RATIO),
                s.complete(),
            )
        });
        let levels = levels::levels(self.link, bytes.len() as u64);
        let target = bytes.clone();
        let best =
            blocking::run(move || best_ending(&target, origin_coded, held, stale_view, levels))
                .await;
        let stale_sent = stale.as_ref().map_or(0, |s| s.sent_coded as u64);
        let dcz = |base, base_len| Frame::Delta {
            format: DeltaFormat::Dcz,
            base,
            base_len,
        };
        #[allow(
            clippy::expect_used,
            reason = "`best_ending` offers the stale endings only given `stale_view`, which \
                      is made of `stale`"
        )]
        let (outcome, sent, opening, body) = match best.ending {
            Ending::ContinueStale { delta } => {
                let s = stale.as_mut().expect("only offered with a stale stream");
                s.finish(&self.tx).await?;
                let sent = s.sent_coded as u64 + delta.len() as u64;
                let opening = dcz(s.hash, s.bytes.len() as u64);
                ("stale-delta", sent, opening, Bytes::from(delta))
            }
            Ending::PrefixOfStale { delta, base_len } => {
                let base = stale.as_ref().expect("only offered with a stale stream");
                let sent = stale_sent + delta.len() as u64;
                let opening = dcz(base.hash, base_len);
                ("stale-prefix-delta", sent, opening, Bytes::from(delta))
            }
            Ending::Held {
                base,
                base_len,
                delta,
            } => {
                let sent = stale_sent + delta.len() as u64;
                ("delta", sent, dcz(base, base_len), Bytes::from(delta))
            }
            Ending::Full { coding, coded } => {
                let outcome = if stale.is_some() {
                    "stale-aborted-full"
                } else {
                    "full"
                };
                let opening = Frame::Full {
                    coding: LinkCoding::Coded(coding),
                };
                (outcome, stale_sent + coded.len() as u64, opening, coded)
            }
        };
        let end = Frame::End {
            hash,
            length: bytes.len() as u64,
        };
        let head = [self.head(status, fields)?, opening.encode()?];
        let frames = head.into_iter().chain(frame::data_frames(&body));
        self.send_together(frames.chain([end.encode()?])).await?;
        record_ending(&self.p, &self.record, outcome, Some(bytes.len() as u64));
        metrics.record_body(
            format!("link-{outcome}"),
            content_type,
            bytes.len() as u64,
            sent,
        );
        Ok(())
    }

    /// The first instance the client named that the server holds as content of this
    /// site (so a client can only be answered relative to that site's content).
    async fn held_base(&self) -> Option<(Hash, Bytes)> {
        let store = self.p.store().cloned()?;
        let (have, site, resource) = (
            self.have.clone(),
            self.ctx.site.clone(),
            self.ctx.resource.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let history = history::load(&store, &resource).unwrap_or_default();
            have.into_iter().find_map(|hash| {
                let own = history.versions.iter().any(|v| v.hash() == Some(hash));
                let bytes = if own {
                    store.get_blob(&hash).ok().flatten()
                } else {
                    dictionaries::dictionary_for(&store, &hash, &site)
                        .ok()
                        .flatten()
                };
                bytes.map(|b| (hash, b))
            })
        })
        .await
        .ok()
        .flatten()
    }

    /// Streams a body as FULL DATA frames (decoding the origin's coding first),
    /// hashing what it sends, then END; after `head` (HEADERS) when given.
    async fn stream_full(
        &self,
        head: Option<Bytes>,
        body: Body,
        decode: Option<ContentCoding>,
        outcome: &'static str,
    ) -> Result<(), Stopped> {
        let config = self.p.config();
        let limits = &config.limits;
        let level = levels::levels(self.link, limits.max_buffered_body as u64).stream;
        let decoder = decode.map(|c| Windows::new(c, limits.max_decoded_body));
        self.pump_full(FullStream::new(head, level)?, body, decoder, 0, outcome)
            .await
    }

    /// Feeds `full` the rest of `body` after its first `skip` bytes, decoded with
    /// `decoder` a window at a time, sending frames as they are made (so a chunk that
    /// decodes to far more than itself waits for the link window by window); then END.
    async fn pump_full(
        &self,
        mut full: FullStream,
        mut body: Body,
        mut decoder: Option<Windows>,
        mut skip: u64,
        outcome: &'static str,
    ) -> Result<(), Stopped> {
        let undecodable = |e: codec::DecodeError| format!("origin body failed to decode: {e}");
        while let Some(frame) = body.frame().await {
            let mut data = match frame.map(|f| f.into_data()) {
                Ok(Ok(data)) => data,
                Ok(Err(_)) => continue, // trailers
                Err(e) => {
                    let message = format!("origin body failed: {e}");
                    return self.fail(StatusCode::BAD_GATEWAY, &message).await;
                }
            };
            let skipped = skip.min(data.len() as u64);
            skip -= skipped;
            let data = data.split_off(skipped as usize);
            let Some(windows) = decoder.as_mut() else {
                full.feed(data).await;
                self.send_together(full.outbox.drain(..)).await?;
                continue;
            };
            let mut rest = &data[..];
            loop {
                match windows.next(&mut rest) {
                    Ok(Some(window)) => full.feed(window.into()).await,
                    Ok(None) => break,
                    Err(e) => return self.fail(StatusCode::BAD_GATEWAY, &undecodable(e)).await,
                }
                self.send_together(full.outbox.drain(..)).await?;
            }
        }
        if let Some(windows) = decoder {
            match windows.finish() {
                Ok(rest) => full.feed(Bytes::from(rest)).await,
                Err(e) => return self.fail(StatusCode::BAD_GATEWAY, &undecodable(e)).await,
            }
        }
        self.end_full(full, outcome).await
    }

    /// Sends what `full` still holds, the end of its coded stream, and END.
    async fn end_full(&self, full: FullStream, outcome: &'static str) -> Result<(), Stopped> {
        let (frames, hash, length) = full.finish().await;
        let end = Frame::End { hash, length };
        self.send_together(frames.into_iter().chain([end.encode()?]))
            .await?;
        record_ending(&self.p, &self.record, outcome, Some(length));
        Ok(())
    }

    /// A finished response from the pipeline (origin failure, 404, 405 …), relayed
    /// as it is: the browser gets what a direct request would have got.
    async fn relay_error(self, response: Response<Body>) -> Result<(), Stopped> {
        let (parts, body) = response.into_parts();
        let mut fields = parts.headers;
        fields.remove(header::CONTENT_LENGTH);
        let head = self.head(parts.status, fields)?;
        self.stream_full(Some(head), body, None, "relayed").await
    }

    async fn fail(&self, status: StatusCode, message: &str) -> Result<(), Stopped> {
        record_ending(&self.p, &self.record, "error", None);
        self.status.store(status.as_u16(), Ordering::Relaxed);
        let error = Frame::Error {
            status,
            message: message.to_string(),
        };
        self.send_together([error.encode()?]).await
    }

    /// Instances of pages the cache may not reuse (no-cache, no validators, no
    /// freshness, `Vary: *`) are still kept as delta bases, written before the answer
    /// so the client's next request finds them. Never `no-store` ones, answers to a
    /// request with a body (which may have shaped them), nor any whose audience is
    /// not everyone (`wirefold_http::audience`): a page made for one user must not be
    /// streamed to another.
    /// Returns the body, hash and validator to keep.
    fn base_to_keep(&self, instance: &Instance) -> Option<(Bytes, Hash, Option<String>)> {
        let InstanceBody::Whole { bytes, hash } = &instance.body else {
            return None;
        };
        let request = &self.ctx.profile;
        let public_path = self.p.config().cache.is_public_path(request.uri.path());
        let shareable = !CacheControl::from_headers(&instance.headers).no_store
            && audience(&request.headers, &instance.headers, public_path).may_derive();
        if instance.reusable
            || !shareable
            || request.has_body
            || instance.status != StatusCode::OK
            || request.method != Method::GET
        {
            return None;
        }
        let etag = instance
            .headers
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Some((bytes.clone(), *hash, etag))
    }

    async fn keep_base(&self, (bytes, hash, etag): (Bytes, Hash, Option<String>)) {
        let Some(store) = self.p.store().cloned() else {
            return;
        };
        let resource = self.ctx.resource.clone();
        let delta = self.p.config().delta.clone();
        let kept = tokio::task::spawn_blocking(move || {
            store.put_blob(&bytes)?;
            let version = history::Version {
                hash: hash.to_hex(),
                etag,
                time: now_unix(),
                size: bytes.len() as u64,
            };
            record_version(&store, &delta, &resource, version)
        })
        .await;
        if let Ok(Err(e)) = kept {
            self.p.metrics.store_write_errors.inc();
            tracing::warn!(error = %e, "keeping an uncacheable instance as a delta base failed");
        }
    }

    /// HEADERS, encoded; the status is kept for the request's metrics, and the media
    /// type for its record (the link response's own is the frames').
    fn head(&self, status: StatusCode, fields: HeaderMap) -> Result<Bytes, OversizedFrame> {
        self.status.store(status.as_u16(), Ordering::Relaxed);
        let content_type = fields.get(header::CONTENT_TYPE).cloned();
        self.record.update(|r| r.content_type = content_type);
        Frame::Headers { status, fields }.encode()
    }

    /// Sends encoded frames that are ready together ([`FrameSender::send_together`]).
    async fn send_together(&self, frames: impl IntoIterator<Item = Bytes>) -> Result<(), Stopped> {
        Ok(self.tx.send_together(frames).await?)
    }
}

/// What a link exchange knows of the origin's answer while `fetch` reads it.
#[derive(Default)]
struct OriginWatch {
    head: Option<(StatusCode, HeaderMap)>,
    decoder: Option<Windows>,
    /// The new instance so far, decoded (until a cut-through starts).
    received: Vec<u8>,
    /// Bytes of it already compared with the stale instance.
    compared: usize,
    /// The coded length the origin declared, and the coded bytes seen so far.
    length: Option<u64>,
    coded: u64,
    first_data: Option<Instant>,
    /// The new instance differs from the stale one within the stale one's first half.
    diverged_early: bool,
    /// The origin's body has ended.
    ended: bool,
    /// No cut-through can come any more: the rest of the answer is not watched.
    settled: bool,
    cut: Option<FullStream>,
}

/// A body still arriving this long after its first bytes is slow enough to cut
/// through; one that arrives faster is better served by the delta chosen once it
/// is in.
const ARRIVING: std::time::Duration = std::time::Duration::from_millis(100);

impl OriginWatch {
    /// Stops watching (and holding what arrived).
    fn settle(&mut self) {
        self.settled = true;
        self.diverged_early = false;
        self.decoder = None;
        self.received = Vec::new();
    }

    /// When to start cutting through, if the new instance diverged early and its
    /// body is still on its way.
    fn cut_due(&self) -> Option<Instant> {
        let more_to_come = !self.ended && self.length.is_none_or(|length| self.coded < length);
        match (
            self.diverged_early && more_to_come && self.cut.is_none(),
            self.first_data,
        ) {
            (true, Some(first)) => Some(first + ARRIVING),
            _ => None,
        }
    }
}

/// An instance streaming to the client as FULL while its bytes come: encoded,
/// hashed and framed into `outbox`, which the exchange drains as the link takes
/// frames.
struct FullStream {
    encoder: Option<Encoder>,
    sha: Sha256,
    /// Decoded bytes fed.
    fed: u64,
    outbox: VecDeque<Bytes>,
}

impl FullStream {
    /// Starts with `head` (encoded HEADERS, when given) and FULL queued.
    fn new(
        head: Option<Bytes>,
        (coding, level): (ContentCoding, u32),
    ) -> Result<Self, OversizedFrame> {
        let full = Frame::Full {
            coding: LinkCoding::Coded(coding),
        };
        Ok(FullStream {
            encoder: Some(Encoder::new(coding, level)),
            sha: Sha256::new(),
            fed: 0,
            outbox: head.into_iter().chain([full.encode()?]).collect(),
        })
    }

    /// Encodes and flushes `data`, queueing its DATA frames.
    #[allow(
        clippy::expect_used,
        reason = "only `finish`, which consumes the stream, keeps the encoder; `feed` puts \
                  it back before returning (if cancelled, its caller drops the stream)"
    )]
    async fn feed(&mut self, data: Bytes) {
        self.sha.update(&data);
        self.fed += data.len() as u64;
        let mut encoder = self.encoder.take().expect("an encoder until finish");
        let (encoder, out) = blocking::run(move || {
            encoder.write(&data);
            encoder.flush();
            let out = encoder.take_output();
            (encoder, out)
        })
        .await;
        self.encoder = Some(encoder);
        self.outbox.extend(frame::data_frames(&out));
    }

    /// The SHA-256 of everything fed so far.
    fn hash(&self) -> Hash {
        Hash(self.sha.clone().finalize().into())
    }

    /// Every frame still to send, the end of the coded stream included; the SHA-256
    /// and length of everything fed.
    #[allow(
        clippy::expect_used,
        reason = "`feed` puts the encoder back before returning (if cancelled, its caller \
                  drops the stream)"
    )]
    async fn finish(mut self) -> (VecDeque<Bytes>, Hash, u64) {
        let hash = self.hash();
        let encoder = self.encoder.take().expect("an encoder until finish");
        let tail = blocking::run(move || encoder.finish()).await;
        self.outbox.extend(frame::data_frames(&tail));
        (self.outbox, hash, self.fed)
    }
}

/// Whether `arrived` shares little with `stale`: a delta against it would not even
/// halve plain compression, so sending the new bytes as they come loses nothing.
fn shares_little(arrived: &[u8], stale: &[u8]) -> bool {
    let delta = codec::dictionary::encode(DictionaryCoding::Dcz, 3, stale, arrived);
    let mut plain = Encoder::new(ContentCoding::Zstd, 3);
    plain.write(arrived);
    delta.len() * 2 > plain.finish().len()
}

/// A second handle on a `Whole` instance (its bytes are shared, not copied).
fn whole_copy(instance: &Instance) -> Option<Instance> {
    let InstanceBody::Whole { bytes, hash } = &instance.body else {
        return None;
    };
    Some(Instance {
        status: instance.status,
        headers: instance.headers.clone(),
        body: InstanceBody::Whole {
            bytes: bytes.clone(),
            hash: *hash,
        },
        provenance: instance.provenance,
        reusable: instance.reusable,
        last_modified: instance.last_modified,
        origin_coded: instance.origin_coded.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn have_lists_are_bounded_and_checked() {
        let mut headers = HeaderMap::new();
        let h = Hash::of(b"a").to_hex();
        headers.insert(
            frame::HAVE_HEADER,
            HeaderValue::from_str(&format!("{h}, {h}")).unwrap(),
        );
        assert_eq!(parse_have(&headers).unwrap().len(), 2);
        headers.insert(frame::HAVE_HEADER, HeaderValue::from_static("nothex"));
        assert!(parse_have(&headers).unwrap_err().contains("nothex"));
        let many = vec![h; frame::MAX_HAVE + 1].join(",");
        headers.insert(frame::HAVE_HEADER, HeaderValue::from_str(&many).unwrap());
        assert!(parse_have(&headers).unwrap_err().contains("at most"));
    }
}
