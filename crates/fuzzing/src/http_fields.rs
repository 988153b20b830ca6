//! `http_fields`: every `wirefold-http` parser of request and response fields over a
//! `HeaderMap` built from arbitrary bytes, with the properties each promises.
//!
//! Input: lines separated by `\n`, each `name:value` (split at the first `:`). A name of
//! at most one byte stands for one of [`NAMES`] (so short inputs reach every parser);
//! longer names are taken as they are. Lines whose name or value `http` refuses are
//! skipped. Every value that is UTF-8 also goes to the `&str` parsers directly.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use wirefold_http::client_hints::{MAX_DPR, MAX_WIDTH};
use wirefold_http::conditional::Preconditions;
use wirefold_http::delta::AcceptedManipulations;
use wirefold_http::dictionary;
use wirefold_http::{
    AcceptEncoding, CacheControl, ClientHints, ContentCoding, EntityTag, IfNoneMatch, RangeFields,
    RangeRequest, Vary,
};

/// The fields the parsers read, indexed by a one-byte name.
pub const NAMES: &[&str] = &[
    "available-dictionary",
    "use-as-dictionary",
    "accept-encoding",
    "a-im",
    "if-none-match",
    "if-match",
    "if-modified-since",
    "if-unmodified-since",
    "range",
    "if-range",
    "etag",
    "last-modified",
    "cache-control",
    "pragma",
    "vary",
    "save-data",
    "sec-ch-prefers-reduced-data",
    "ect",
    "rtt",
    "downlink",
    "sec-ch-dpr",
    "dpr",
    "sec-ch-viewport-width",
    "viewport-width",
    "sec-ch-width",
    "width",
    "sec-ch-device-memory",
    "device-memory",
    "sec-fetch-site",
    "sec-fetch-mode",
    "origin",
    "access-control-allow-origin",
];

/// Representation lengths every `Range` is resolved against, besides one from the input.
const LENGTHS: &[u64] = &[0, 1, 2, 3, 100, 4096, u64::MAX - 1, u64::MAX];

pub fn http_fields(input: &[u8]) {
    let mut headers = HeaderMap::new();
    let mut values = Vec::new();
    for line in input.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let name = match name {
            [] => HeaderName::from_static(NAMES[0]),
            [b] => HeaderName::from_static(NAMES[usize::from(*b) % NAMES.len()]),
            name => match HeaderName::from_bytes(name) {
                Ok(name) => name,
                Err(_) => continue,
            },
        };
        if let Ok(text) = std::str::from_utf8(value) {
            values.push(text.to_owned());
        }
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(name, value);
        }
    }
    check_headers(&headers);
    for value in &values {
        check_value(value);
    }
}

fn check_headers(headers: &HeaderMap) {
    // Dictionaries (RFC 9842).
    if let Some(hash) = dictionary::available_dictionary(headers) {
        let mut again = HeaderMap::new();
        again.insert(
            dictionary::AVAILABLE_DICTIONARY,
            dictionary::available_dictionary_value(&hash),
        );
        assert_eq!(dictionary::available_dictionary(&again), Some(hash));
    }
    if let Some(pattern) = dictionary::use_as_dictionary_match(headers) {
        if let Some(value) = dictionary::use_as_dictionary(&pattern, &[], None) {
            let mut again = HeaderMap::new();
            again.insert(dictionary::USE_AS_DICTIONARY, value);
            assert_eq!(
                dictionary::use_as_dictionary_match(&again).as_deref(),
                Some(pattern.as_str()),
                "Use-As-Dictionary match does not survive a roundtrip"
            );
        }
    }
    let _ = dictionary::dictionary_allowed(headers, headers);
    let _ = dictionary::dictionary_allowed(headers, &HeaderMap::new());

    // Content negotiation.
    let accept = AcceptEncoding::from_headers(headers);
    check_accept(&accept);
    if let Some(a_im) = AcceptedManipulations::from_headers(headers) {
        let _ = a_im.accepts("vcdiff");
        let _ = a_im.accepts("");
    }

    // Validators and preconditions.
    let etag = EntityTag::from_headers(headers);
    let last_modified = wirefold_http::last_modified(headers);
    let preconditions = Preconditions::from_headers(headers);
    for method in [Method::GET, Method::HEAD, Method::POST, Method::PUT] {
        let _ = preconditions.evaluate(&method, etag.as_ref(), last_modified);
        let _ = preconditions.evaluate(&method, None, Some(SystemTime::now()));
    }
    if let Some(condition) = IfNoneMatch::from_headers(headers) {
        let _ = condition.matches(etag.as_ref());
        let _ = condition.matches(None);
        if let IfNoneMatch::Tags(tags) = &condition {
            for tag in tags {
                assert!(
                    condition.matches(Some(tag)),
                    "If-None-Match misses its own tag"
                );
            }
        }
    }

    // Ranges: a `Single` range lies within the representation.
    let range = RangeFields::from_headers(headers);
    let input_len = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    for len in LENGTHS.iter().copied().chain(input_len) {
        for (etag, modified) in [
            (etag.as_ref(), last_modified),
            (None, None),
            (None, Some(UNIX_EPOCH + Duration::from_secs(784_111_777))),
        ] {
            if let RangeRequest::Single {
                start,
                end_inclusive,
            } = range.resolve(len, etag, modified)
            {
                assert!(
                    start <= end_inclusive && end_inclusive < len,
                    "range {start}-{end_inclusive} outside a representation of {len} bytes"
                );
            }
        }
    }

    // Client Hints: every value within the bounds the module promises.
    let hints = ClientHints::from_headers(headers);
    for width in [hints.width, hints.viewport_width].into_iter().flatten() {
        assert!((1..=MAX_WIDTH).contains(&width), "width {width}");
    }
    if let Some(dpr) = hints.dpr {
        assert!(dpr.is_finite() && dpr > 0.0 && dpr <= MAX_DPR, "dpr {dpr}");
    }
    if let Some(memory) = hints.device_memory_gib {
        assert!(memory.is_finite() && memory > 0.0, "device memory {memory}");
    }
    let _ = hints.any();

    // Caching.
    let _ = CacheControl::from_headers(headers);
    let vary = Vary::from_headers(headers);
    if let Vary::Fields(names) = &vary {
        assert!(!names.is_empty());
        assert!(
            names.windows(2).all(|w| w[0].as_str() < w[1].as_str()),
            "Vary fields not sorted and deduplicated"
        );
    }
    let key = vary.secondary_key(headers, &[]);
    assert_eq!(key.is_none(), vary == Vary::Any);
    if let Some(key) = key {
        assert!(key.is_ascii(), "a secondary key outside ASCII");
    }
}

fn check_accept(accept: &AcceptEncoding) {
    for coding in ContentCoding::ALL {
        let q = accept.quality(coding.token());
        assert!((0.0..=1.0).contains(&q), "quality {q}");
    }
    let _ = accept.identity_acceptable();
    if let Some(chosen) = accept.negotiate(ContentCoding::ALL) {
        assert!(accept.accepts(chosen), "negotiated a coding not accepted");
    }
}

/// The `&str` parsers on one value.
fn check_value(value: &str) {
    check_accept(&AcceptEncoding::parse(value));
    let _ = CacheControl::parse(value);
    let _ = IfNoneMatch::parse(value);
    if let Some(tag) = EntityTag::parse(value) {
        assert!(tag.weak_eq(&tag));
        let shown = tag.to_string();
        assert_eq!(EntityTag::parse(&shown), Some(tag), "entity tag roundtrip");
    }
}
