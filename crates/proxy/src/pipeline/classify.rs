//! Stage 1, classify: the request head parsed once into typed values.

use http::header::{AUTHORIZATION, RANGE};
use http::uri::Authority;
use http::{HeaderMap, Method, Request, Uri};
use http_body::Body as _;
use wirefold_http::accept_encoding::AcceptEncoding;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::host::{request_host, HostError};

use crate::body::Body;

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
}

/// Runs first, on every request; changes nothing, only reads.
///
/// # Errors
/// A request whose host is missing or ambiguous (RFC 9112 §3.2): answered 400.
pub fn classify(req: &Request<Body>) -> Result<ClientProfile, HostError> {
    let headers = req.headers();
    Ok(ClientProfile {
        method: req.method().clone(),
        uri: req.uri().clone(),
        headers: headers.clone(),
        accept_encoding: AcceptEncoding::from_headers(headers),
        cache_control: CacheControl::from_headers(headers),
        has_authorization: headers.contains_key(AUTHORIZATION),
        wants_range: headers.contains_key(RANGE),
        host: request_host(req.version(), req.uri(), headers)?,
        has_body: !req.body().is_end_stream(),
    })
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
