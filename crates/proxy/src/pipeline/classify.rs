//! Stage 1, classify: the request head parsed once into typed values.

use http::header::{AUTHORIZATION, RANGE};
use http::Request;
use http_body::Body as _;
use store::Hash;
use wirefold_http::accept_encoding::AcceptEncoding;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::client_hints::ClientHints;
use wirefold_http::conditional::Preconditions;
use wirefold_http::delta::AcceptedManipulations;
use wirefold_http::dictionary::available_dictionary;
use wirefold_http::host::{request_host, HostError};
use wirefold_http::range::RangeFields;

use crate::body::Body;
use crate::model::ClientProfile;

/// Runs first, on every request: parses every request field a later stage acts on,
/// once, into typed values. Changes nothing, only reads.
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
        preconditions: Preconditions::from_headers(headers),
        range: RangeFields::from_headers(headers),
        accepted_manipulations: AcceptedManipulations::from_headers(headers),
        available_dictionary: available_dictionary(headers).map(Hash),
        client_hints: ClientHints::from_headers(headers),
    })
}
