//! The request pipeline, one module per stage:
//!
//! ```text
//! classify ─► fetch ─► remember ─► adapt ─► hint ─► encode ─► respond
//! ```
//!
//! - [`classify`] turns the request head into a [`ClientProfile`](classify::ClientProfile).
//! - [`fetch`] yields the current [`Instance`]: from the cache, the origin, or the file root.
//! - [`remember`] records a storable instance in the store.
//! - [`adapt`] picks the fidelity variant (passes through until adaptive fidelity lands).
//! - [`hint`] tells the client what it will need next (passes through until inline
//!   download lands).
//! - [`encode`] chooses and produces the [`Representation`](encode::Representation) sent.
//! - [`respond`] writes status, headers and body, and evaluates conditionals and ranges.
//!
//! Stages share nothing but the [`RequestContext`] and the values they hand on.

pub mod adapt;
pub mod classify;
pub mod encode;
pub mod fetch;
pub mod hint;
pub mod remember;
pub mod respond;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use store::{Hash, Store};
use wirefold_http::ContentCoding;

use crate::background::Background;
use crate::body::Body;
use crate::cache::{HotEntries, Inflight};
use crate::config::Config;
use crate::decode::DecodeBudget;
use crate::files::FileSource;
use crate::forward::ForwardOrigins;
use crate::metrics::Metrics;
use crate::origin::{ConnInfo, Origin};

/// Where current instances come from.
pub enum Source {
    Origin(Arc<Origin>),
    Files(FileSource),
    /// The origin each request names in its absolute URI (a server proxy's link).
    Forward(Box<ForwardOrigins>),
}

/// Everything the stages share for the life of the server.
pub struct Pipeline {
    pub config: Arc<Config>,
    pub source: Source,
    /// Absent when caching is disabled.
    pub store: Option<Store>,
    pub metrics: Arc<Metrics>,
    pub(crate) inflight: Inflight,
    pub(crate) hot: HotEntries,
    pub(crate) announcements: crate::delta::DictionaryAnnouncements,
    pub(crate) encode_jobs: encode::BackgroundJobs,
    pub(crate) background: Background,
    pub(crate) link: crate::link::serve::LinkServer,
    /// Decoded bytes buffered bodies may hold (`limits.max_decoding_memory`).
    pub(crate) decode_budget: Arc<DecodeBudget>,
}

/// Per-request state, built by `classify` and read by every later stage.
pub struct RequestContext {
    pub profile: classify::ClientProfile,
    /// Whose content this is: the upstream host, or `root` for the file source.
    /// Dictionaries are only used within one site.
    pub site: String,
    /// The resource's key: site, path and query. Histories are kept per resource.
    pub resource: String,
    pub conn: ConnInfo,
    pub started: Instant,
    /// Set by a link exchange that wants to watch the origin's answer arrive while
    /// `fetch` reads it whole (to cut through when it diverges from a stale copy).
    pub body_tap: Option<BodyTap>,
}

/// What a body tap sees: the instance's head (as `fetch` will hand it on), then the
/// origin's bytes as they arrive, still in the origin's coding (`decode`), then the
/// body's end; `length` is the coded length the origin declared.
pub enum TapEvent {
    Head {
        status: StatusCode,
        fields: HeaderMap,
        decode: Option<ContentCoding>,
        length: Option<u64>,
    },
    Data(Bytes),
    End,
}

pub type BodyTap = tokio::sync::mpsc::UnboundedSender<TapEvent>;

/// The current instance of a resource, as `fetch` yields it.
pub struct Instance {
    pub status: StatusCode,
    /// End-to-end response fields. For `Whole` bodies, `Content-Length` and
    /// `Content-Encoding` are absent: the body is decoded and `respond` sets them.
    pub headers: HeaderMap,
    pub body: InstanceBody,
    pub provenance: Provenance,
    /// The body may be kept and reused (it was or may be stored): its encodings may
    /// be cached too.
    pub reusable: bool,
    pub last_modified: Option<SystemTime>,
    /// A `Whole` body as the origin coded it, when it came coded and was decoded
    /// here: a link can send it as is, with no compression work of its own.
    pub origin_coded: Option<(ContentCoding, Bytes)>,
}

pub enum InstanceBody {
    /// The decoded content, whole, and its SHA-256.
    Whole { bytes: Bytes, hash: Hash },
    /// A stream carrying `coding`; `length` is its encoded length when known.
    Stream {
        body: Body,
        coding: StreamCoding,
        length: Option<u64>,
    },
    /// A large file, identity, streamed from disk (seekable for ranges).
    File { file: tokio::fs::File, len: u64 },
    /// No body (HEAD answered upstream, 204, 304).
    Empty,
}

/// The content coding a streamed body carries as it arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamCoding {
    Identity,
    Known(ContentCoding),
    /// A coding (or a stack of codings) wirefold does not decode: forwarded untouched
    /// with its `Content-Encoding` value.
    Unknown(http::HeaderValue),
}

/// How the instance was obtained; reported in `Cache-Status` (RFC 9211) and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provenance {
    /// Served from the cache while fresh.
    Hit { age: Duration },
    /// Served from the cache after the origin confirmed it (304).
    Revalidated { age: Duration },
    /// Served stale: while revalidating in the background, or because the origin failed.
    Stale { age: Duration },
    /// Fetched from the origin; `stored` if `remember` is to keep it.
    Fetched { stored: bool },
    /// Forwarded without consulting the cache (method, range, authorization, no-store).
    Bypass,
    /// Read from the file root.
    File,
}

impl Pipeline {
    pub fn new(
        config: Arc<Config>,
        source: Source,
        store: Option<Store>,
        metrics: Arc<Metrics>,
    ) -> Pipeline {
        let decode_budget = DecodeBudget::new(config.limits.max_decoding_memory, &metrics);
        Pipeline {
            decode_budget,
            config,
            source,
            store,
            metrics,
            inflight: Inflight::default(),
            hot: HotEntries::default(),
            announcements: crate::delta::DictionaryAnnouncements::default(),
            encode_jobs: encode::BackgroundJobs::default(),
            background: Background::default(),
            link: crate::link::serve::LinkServer::default(),
        }
    }

    /// Answers one request. Never fails: every error becomes a response.
    pub async fn handle(self: &Arc<Self>, req: Request<Body>, conn: ConnInfo) -> Response<Body> {
        let started = Instant::now();
        let method = req.method().clone();
        let response = self.run_stages(req, conn, started).await;
        self.metrics
            .record_request(&method, response.status(), started.elapsed());
        response
    }

    async fn run_stages(
        self: &Arc<Self>,
        req: Request<Body>,
        conn: ConnInfo,
        started: Instant,
    ) -> Response<Body> {
        let ctx = match self.context(&req, conn, started) {
            Ok(ctx) => ctx,
            Err(message) => return respond::error_response(StatusCode::BAD_REQUEST, &message),
        };
        let fetched = match fetch::fetch(self, &ctx, req).await {
            Ok(fetched) => fetched,
            Err(response) => return response,
        };
        let instance = remember::remember(self, fetched).await;
        let instance = adapt::adapt(&ctx, instance);
        let instance = hint::hint(&ctx, instance);
        let representation = encode::encode(self, &ctx, instance).await;
        respond::respond(self, &ctx, representation).await
    }

    /// Classifies the request and names its site and resource. A forwarded request
    /// must name an absolute `http://` or `https://` URI.
    pub fn context(
        &self,
        req: &Request<Body>,
        conn: ConnInfo,
        started: Instant,
    ) -> Result<RequestContext, String> {
        let profile = classify::classify(req).map_err(|e| e.to_string())?;
        let site = match &self.source {
            Source::Origin(origin) => origin
                .upstream_host(profile.host.as_ref())
                .to_str()
                .unwrap_or_default()
                .to_string(),
            Source::Files(_) => "root".to_string(),
            Source::Forward(_) => ForwardOrigins::site_of(&profile.uri)
                .ok_or("a server proxy needs an absolute http:// or https:// URI")?,
        };
        let resource = format!("{site}{}", profile.path_and_query());
        Ok(RequestContext {
            profile,
            site,
            resource,
            conn,
            started,
            body_tap: None,
        })
    }
}
