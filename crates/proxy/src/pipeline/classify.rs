//! Stage 1, classify: the request head parsed once into typed values.

use http::header::{AUTHORIZATION, RANGE};
use http::{HeaderMap, Method, Request, Uri};
use wirefold_http::accept_encoding::AcceptEncoding;
use wirefold_http::cache_control::CacheControl;

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
}

/// Runs first, on every request; changes nothing, only reads.
pub fn classify(req: &Request<Body>) -> ClientProfile {
    let headers = req.headers();
    ClientProfile {
        method: req.method().clone(),
        uri: req.uri().clone(),
        headers: headers.clone(),
        accept_encoding: AcceptEncoding::from_headers(headers),
        cache_control: CacheControl::from_headers(headers),
        has_authorization: headers.contains_key(AUTHORIZATION),
        wants_range: headers.contains_key(RANGE),
    }
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
