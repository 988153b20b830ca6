//! The values the stages hand each other: the request as classified, the per-request
//! context, and the current instance of a resource. A leaf: it names no stage and no
//! service, so every stage and every caller of the pipeline may use it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use fidelity::choice::LinkEstimate;
use http::uri::Authority;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use store::Hash;
use wirefold_http::accept_encoding::AcceptEncoding;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::client_hints::ClientHints;
use wirefold_http::conditional::{EntityTag, Preconditions};
use wirefold_http::delta::AcceptedManipulations;
use wirefold_http::range::RangeFields;
use wirefold_http::ContentCoding;

use crate::body::Body;

/// How the client reached us, for `X-Forwarded-*`.
#[derive(Clone, Copy, Debug)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    pub tls: bool,
    /// The accepted socket, for its kernel statistics (TCP_INFO); valid while the
    /// connection is.
    pub socket: Option<std::os::fd::RawFd>,
}

/// What the client asked for and what it can take.
pub struct ClientProfile {
    pub method: Method,
    pub uri: Uri,
    /// The request's fields, kept for conditionals, ranges and `Vary` matching.
    pub headers: HeaderMap,
    pub accept_encoding: AcceptEncoding,
    /// Request cache directives (`no-cache`, `max-age`, `only-if-cached`, …).
    pub cache_control: CacheControl,
    /// Credentials make a response unfit to share (RFC 9111 §3.5).
    pub has_authorization: bool,
    pub wants_range: bool,
    /// The host the request is for: the target's authority (absolute form,
    /// `:authority`), else its one `Host` field; `None` only for HTTP/1.0 without.
    pub host: Option<Authority>,
    /// The request carries a body (any framing but an empty one). Such a request is
    /// forwarded with its body and never fills or reads the cache.
    pub has_body: bool,
    /// `If-Match`, `If-None-Match`, `If-Modified-Since`, `If-Unmodified-Since`.
    pub preconditions: Preconditions,
    /// `Range` and `If-Range`.
    pub range: RangeFields,
    /// `A-IM` (RFC 3229): present when the client is delta-aware.
    pub accepted_manipulations: Option<AcceptedManipulations>,
    /// `Available-Dictionary` (RFC 9842): the dictionary the client holds.
    pub available_dictionary: Option<Hash>,
    /// What the client says of its link and device.
    pub client_hints: ClientHints,
}

impl ClientProfile {
    pub fn is_get_or_head(&self) -> bool {
        self.method == Method::GET || self.method == Method::HEAD
    }

    pub fn path_and_query(&self) -> &str {
        self.uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/")
    }
}

/// Per-request state, built by `classify` and read by every later stage.
pub struct RequestContext {
    pub profile: ClientProfile,
    /// Whose content this is: the upstream host, or `root` for the file source.
    /// Dictionaries are only used within one site.
    pub site: String,
    /// The resource's key: site, path and query. Histories are kept per resource.
    pub resource: String,
    pub conn: ConnInfo,
    pub started: Instant,
    /// How long the origin took to answer, set by `fetch` for the request's record.
    pub origin_wait: OriginWait,
    /// Whether this answer may be prepared for the same request again, and on what
    /// it rests ([`crate::pipeline::prepared`]).
    pub repeat: Repeat,
    /// The passive estimate of the client's link, read at most once per response.
    pub link: LinkRead,
    /// [`RequestContext::url`], made on first use (a page asks for it in several
    /// stages, most requests never), with the length of its origin.
    url: OnceLock<(Arc<str>, usize)>,
}

impl RequestContext {
    pub fn new(
        profile: ClientProfile,
        site: String,
        resource: String,
        conn: ConnInfo,
        started: Instant,
    ) -> RequestContext {
        RequestContext {
            profile,
            site,
            resource,
            conn,
            started,
            origin_wait: OriginWait::default(),
            repeat: Repeat::default(),
            link: LinkRead::default(),
            url: OnceLock::new(),
        }
    }

    /// The URL of the resource asked for, as the client named it: what a page's
    /// relative references resolve against, what its manifest is found by, and what
    /// a page's subresources are named by in it.
    pub fn url(&self) -> Arc<str> {
        self.url_and_origin_len().0.clone()
    }

    /// `scheme://host[:port]` as the client reached us.
    pub fn origin(&self) -> &str {
        let (url, origin_len) = self.url_and_origin_len();
        &url[..*origin_len]
    }

    fn url_and_origin_len(&self) -> &(Arc<str>, usize) {
        self.url.get_or_init(|| {
            let scheme = if self.conn.tls { "https" } else { "http" };
            let host = self
                .profile
                .host
                .as_ref()
                .map_or(self.site.as_str(), |h| h.as_str());
            let path = self.profile.path_and_query();
            let origin_len = scheme.len() + "://".len() + host.len();
            let mut url = String::with_capacity(origin_len + path.len());
            for part in [scheme, "://", host, path] {
                url.push_str(part);
            }
            (url.into(), origin_len)
        })
    }
}

/// The time from sending this request's exchange upstream to the origin's response
/// head, summed when one request makes several (never more than one today). `fetch`
/// records it; the request's record (access log, status page) reads it.
#[derive(Debug, Default)]
pub struct OriginWait(Mutex<Option<Duration>>);

impl OriginWait {
    pub fn add(&self, wait: Duration) {
        let mut total = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *total = Some(total.unwrap_or_default() + wait);
    }

    /// `None` when no origin was asked (a cache hit, a file, a refusal).
    pub fn get(&self) -> Option<Duration> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether the answer to a request may be sent again to the same request without
/// running the stages ([`crate::pipeline::prepared`]), and what that rests on. Nothing is
/// repeatable until `fetch` vouches for its instance (a file of a known size and
/// modification time, a fresh cache hit, a derived dictionary); a stage that reads
/// anything that changes without a store write, background work or a reload rules
/// the answer out, unless a repeat can check it again ([`Rechoose`]).
#[derive(Debug, Default)]
pub struct Repeat(Mutex<Repeatability>);

#[derive(Clone, Debug, Default)]
pub enum Repeatability {
    /// Nothing vouched for the instance.
    #[default]
    Unknown,
    Vouched(Rests),
    RuledOut,
}

/// What a prepared answer rests on besides the store, background work and the
/// configuration, and what a repeat must redo besides the request's record and
/// metrics.
#[derive(Clone, Debug, Default)]
pub struct Rests {
    /// The file the instance was read from, as found: a repeat finds it again
    /// (`files.check_interval_ms` applies) and is made only while it is unchanged.
    pub file: Option<FileMark>,
    /// The answer holds until then at most: a cache hit's freshness, a memo the
    /// stages read expiring.
    pub expires: Option<Instant>,
    /// The instance is a cache hit, whose `Age` grows.
    pub fresh: Option<Fresh>,
    /// A page's size for the page weights (adaptive fidelity), remembered again.
    pub page_size: Option<(Arc<str>, u64, bool)>,
    /// A choice made from what moves with no count (adaptive fidelity's), made
    /// again by every repeat: the answer holds while it comes out the same.
    pub choice: Option<Arc<dyn Rechoose>>,
}

/// A choice a stage made from state that changes with no store write (the link
/// estimate, which every response moves; the egress controller's share, moved once a
/// second): a repeat makes it again from the state now, and its answer stands only
/// if the choice is the same.
pub trait Rechoose: Send + Sync + std::fmt::Debug {
    /// Whether the choice made now, for a request over `conn`, is the one the answer
    /// was made with; reads the client's link through `link` (once per response).
    fn holds(&self, conn: &ConnInfo, link: &LinkRead) -> bool;

    /// Counts the choice as made again, as the stage did (metrics).
    fn count_again(&self);
}

/// The passive estimate of a client's link, read at most once per response: each
/// read adds the connection's kernel sample to its network's estimate, and a
/// prepared answer's check may read it before the stages do.
#[derive(Debug, Default)]
pub struct LinkRead(OnceLock<Option<LinkEstimate>>);

impl LinkRead {
    /// The estimate read for this response, reading it with `read` the first time.
    pub fn get_or_read(&self, read: impl FnOnce() -> Option<LinkEstimate>) -> Option<LinkEstimate> {
        *self.0.get_or_init(read)
    }
}

/// A fresh stored response's age as `fetch` read it.
#[derive(Clone, Copy, Debug)]
pub struct Fresh {
    /// Its age when read…
    pub age: Duration,
    /// …at this time.
    pub read: Instant,
}

impl Fresh {
    /// Its age now.
    pub fn age_now(&self) -> Duration {
        self.age + self.read.elapsed()
    }
}

/// A file as `fetch` found it.
#[derive(Clone, Debug)]
pub struct FileMark {
    pub path: Arc<std::path::Path>,
    pub len: u64,
    pub modified: SystemTime,
}

impl Repeat {
    fn with<T>(&self, f: impl FnOnce(&mut Repeatability) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// `fetch` vouches for its instance, resting on `rests`.
    pub fn vouch(&self, rests: Rests) {
        self.with(|r| {
            if let Repeatability::Unknown = r {
                *r = Repeatability::Vouched(rests);
            }
        });
    }

    /// The answer holds until `deadline` at most (what it read is read afresh then).
    pub fn expire_by(&self, deadline: Instant) {
        self.with(|r| {
            if let Repeatability::Vouched(rests) = r {
                rests.expires = Some(rests.expires.map_or(deadline, |e| e.min(deadline)));
            }
        });
    }

    /// The answer read something a repeat could not check: never repeated.
    pub fn rule_out(&self) {
        self.with(|r| *r = Repeatability::RuledOut);
    }

    /// Remembers a page size a repeat must remember again.
    pub fn redo_page_size(&self, url: &Arc<str>, len: u64, negotiable: bool) {
        self.with(|r| {
            if let Repeatability::Vouched(rests) = r {
                rests.page_size = Some((url.clone(), len, negotiable));
            }
        });
    }

    /// The answer holds while `choice` comes out the same.
    pub fn rechoose(&self, choice: Arc<dyn Rechoose>) {
        self.with(|r| {
            if let Repeatability::Vouched(rests) = r {
                rests.choice = Some(choice);
            }
        });
    }

    /// What the answer rests on, when it is repeatable.
    pub fn rests(&self) -> Option<Rests> {
        self.with(|r| match r {
            Repeatability::Vouched(rests) => Some(rests.clone()),
            _ => None,
        })
    }
}

/// What an [`OriginObserver`] sees: the instance's head (as `fetch` will hand it on),
/// then the origin's bytes as they arrive, still in the origin's coding (`decode`),
/// then the body's end; `length` is the coded length the origin declared.
pub enum OriginEvent {
    Head {
        status: StatusCode,
        fields: HeaderMap,
        decode: Option<ContentCoding>,
        length: Option<u64>,
    },
    Data(Bytes),
    End,
}

/// Watches an origin's answer arrive while `fetch` reads it whole, to act before the
/// body is complete (a link exchange cuts through when the new instance diverges from
/// the stale copy it is streaming). Called only for bodies `fetch` buffers: never for
/// streamed, bodiless or cached answers. Read-only, and synchronous: an observer must
/// not block the read (Pingora's `upstream_response_body_filter`, without the power
/// to change the body).
pub trait OriginObserver: Send + Sync {
    fn observe(&self, event: OriginEvent);
}

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

impl Provenance {
    /// Its name in the access log and on the status page.
    pub fn label(self) -> &'static str {
        match self {
            Provenance::Hit { .. } => "hit",
            Provenance::Revalidated { .. } => "revalidated",
            Provenance::Stale { .. } => "stale",
            Provenance::Fetched { .. } => "miss",
            Provenance::Bypass => "bypass",
            Provenance::File => "file",
        }
    }
}

/// nginx's "client closed request": the status of an answer that did not get through
/// (the client left first). Not a registered status, but one of ours. (Checked when
/// compiling: a const cannot fail at run time.)
pub const CLIENT_CLOSED: StatusCode = match StatusCode::from_u16(499) {
    Ok(status) => status,
    Err(_) => panic!("499 is a status code"),
};

/// A strong validator naming exact content: the first 128 bits of its SHA-256.
pub fn content_etag(hash: &Hash) -> String {
    hash.to_hex()[..32].to_string()
}

/// The `ETag` value of a tag the proxy made or parsed. Its own tags are hex (content
/// hashes, file sizes and times), perhaps with a coding token appended, and
/// [`EntityTag::parse`] admits nothing but visible ASCII.
#[allow(
    clippy::expect_used,
    reason = "such a tag is visible ASCII, which a field value may hold"
)]
pub fn etag_value(tag: &EntityTag) -> HeaderValue {
    // Sized once: most responses carry one made here.
    let mut text = String::with_capacity(tag.opaque.len() + 4);
    if tag.weak {
        text.push_str("W/");
    }
    text.push('"');
    text.push_str(&tag.opaque);
    text.push('"');
    HeaderValue::try_from(text).expect("an entity tag of visible ASCII")
}
