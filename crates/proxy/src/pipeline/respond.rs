//! Stage 7, respond: status, fields and body on the wire. Owns the representation's
//! validators (`ETag` per coding), `Vary`, conditional requests (304/412), single
//! byte ranges (206/416), `Age`, `Cache-Status`, the byte accounting, and what the
//! request's record learns of the answer ([`Delivery`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use codec::dictionary::DictionaryCoding;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Response, StatusCode};
use wirefold_http::conditional::{EntityTag, IfNoneMatch, Precondition, Preconditions};
use wirefold_http::delta::{DELTA_BASE, IM};
use wirefold_http::dictionary::USE_AS_DICTIONARY;
use wirefold_http::digest::{digest_value, WIREFOLD_DIGEST};
use wirefold_http::range::{content_range, unsatisfied_range, RangeFields, RangeRequest};
use wirefold_http::vary::add_field;
use wirefold_http::{decimal_value, ContentCoding};

use super::encode::{Representation, RepresentationBody, SentCoding};
use crate::body::{self, error_response, Body};
use crate::metrics::{content_type_family, BodyCounters, Metrics};
use crate::model::{etag_value, Provenance, RequestContext};
use crate::record::Delivery;

/// Fields a 304 carries over from the full response (RFC 9110 §15.4.5), and the
/// instance digest, which names the instance the client is to keep using.
const NOT_MODIFIED_FIELDS: [HeaderName; 8] = [
    header::CACHE_CONTROL,
    header::CONTENT_LOCATION,
    header::DATE,
    header::ETAG,
    header::EXPIRES,
    header::VARY,
    header::LAST_MODIFIED,
    WIREFOLD_DIGEST,
];

/// Runs last, on every representation: sets validators (a coded representation's
/// `ETag` is its own), `Vary`, `Cache-Status` and `Age`, the instance digest, then
/// answers a conditional request (304, 412) or a range (206, 416) from what
/// `encode` chose. Returns the response, whose body is counted into the metrics as it
/// is sent, what it delivers, for the request's record, and its body when whole.
pub fn respond(metrics: &Arc<Metrics>, ctx: &RequestContext, rep: Representation) -> Answer {
    let Representation {
        status,
        mut headers,
        body,
        coding,
        negotiated,
        original_len,
        instance_hash,
        provenance,
        last_modified,
    } = rep;
    let request = &ctx.profile;
    // Up to 8 fields are added below (digest, Vary, Age, Cache-Status, Content-Encoding,
    // Content-Length, Accept-Ranges, …): one allocation now instead of a rehash midway.
    headers.reserve(8);
    if let Some(hash) = instance_hash {
        headers.insert(WIREFOLD_DIGEST, digest_value(&hash.0));
    }
    let instance_etag = EntityTag::from_headers(&headers);
    let etag = representation_etag(&mut headers, instance_etag.as_ref(), &coding);
    if negotiated {
        add_field(&mut headers, "accept-encoding");
    }
    if let SentCoding::Dictionary(_) = coding {
        add_field(&mut headers, "available-dictionary");
    }
    add_cache_status(&mut headers, provenance);
    let is_head = request.method == Method::HEAD;
    let mut delivery = Delivery {
        mechanism: Some(Cow::Borrowed(coding.mechanism())),
        // HEAD sends no body, so nothing of one is saved.
        original_len: original_len.filter(|_| !is_head),
        cache: Some(provenance),
        dictionary_announced: announces_dictionary(&headers),
        dictionary_used: match coding {
            SentCoding::Dictionary(_) => request.available_dictionary,
            _ => None,
        },
    };

    if status == StatusCode::OK {
        // An RFC 3229 client lists the instances it holds: holding this one in another
        // coding, or whole from a 226, it needs nothing new, and the 304 names the
        // validator it listed. Other clients revalidate the representation sent.
        let delta_aware = request.accepted_manipulations.is_some();
        let held = instance_etag
            .as_ref()
            .filter(|_| delta_aware)
            .and_then(|instance| held_copy(&request.preconditions, instance));
        match request.preconditions.evaluate(
            &request.method,
            held.as_ref().or(etag.as_ref()),
            last_modified,
        ) {
            Precondition::Proceed => {}
            Precondition::NotModified => {
                let nothing = Delivery {
                    mechanism: None,
                    original_len: None,
                    ..delivery
                };
                return Answer {
                    response: not_modified(&headers, held),
                    delivery: nothing,
                    whole: Some(WholeBody::default()),
                };
            }
            Precondition::Failed => {
                let failed = error_response(StatusCode::PRECONDITION_FAILED, "precondition failed");
                return Answer::partial(failed, Delivery::error(Some(provenance)));
            }
        }
    }

    let content_type = content_type_family(
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    );
    match &coding {
        SentCoding::Identity => {}
        SentCoding::Encoded(c) => {
            headers.insert(
                header::CONTENT_ENCODING,
                HeaderValue::from_static(c.token()),
            );
        }
        SentCoding::Origin(value) => {
            headers.insert(header::CONTENT_ENCODING, value.clone());
        }
        SentCoding::Dictionary(c) => {
            headers.insert(
                header::CONTENT_ENCODING,
                HeaderValue::from_static(c.token()),
            );
        }
        SentCoding::Vcdiff { base_etag } => {
            headers.insert(IM, HeaderValue::from_static("vcdiff"));
            // The base as the client listed it: it may hold it under a coding's validator.
            let listed = EntityTag::parse(base_etag)
                .and_then(|base| held_copy(&request.preconditions, &base));
            if let Ok(base) = HeaderValue::from_str(
                &listed.map_or_else(|| base_etag.clone(), |tag| tag.to_string()),
            ) {
                headers.insert(DELTA_BASE, base);
            }
            // Legacy caches must not store a delta; delta-aware ones may (RFC 3229 §10.8).
            headers.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("no-store, im"),
            );
        }
    }
    let rangeable =
        status == StatusCode::OK && coding == SentCoding::Identity && request.method == Method::GET;
    let accounting = Accounting {
        metrics: metrics.clone(),
        mechanism: coding.mechanism(),
        content_type,
        original_len: original_len.filter(|_| !is_head),
        head: is_head,
    };

    let mut whole = None;
    let (status, body, length) = match body {
        RepresentationBody::Empty => {
            whole = Some(WholeBody::default());
            (status, body::empty(), None)
        }
        RepresentationBody::Whole(bytes) => {
            let len = bytes.len() as u64;
            if rangeable || status == StatusCode::OK && coding == SentCoding::Identity {
                headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            }
            match range(
                rangeable,
                &request.range,
                len,
                etag.as_ref(),
                last_modified,
                &mut headers,
            ) {
                Some(RangeRequest::Single {
                    start,
                    end_inclusive,
                }) => {
                    let part = bytes.slice(start as usize..=end_inclusive as usize);
                    let n = part.len() as u64;
                    whole = Some(WholeBody::counted(&part, &accounting, n));
                    (StatusCode::PARTIAL_CONTENT, body::full(part), Some(n))
                }
                Some(_) => {
                    return Answer::partial(
                        range_not_satisfiable(len),
                        Delivery::error(Some(provenance)),
                    )
                }
                None => {
                    whole = Some(WholeBody::counted(&bytes, &accounting, len));
                    (status, body::full(bytes), Some(len))
                }
            }
        }
        RepresentationBody::File { file, len } => {
            headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            match range(
                rangeable,
                &request.range,
                len,
                etag.as_ref(),
                last_modified,
                &mut headers,
            ) {
                Some(RangeRequest::Single {
                    start,
                    end_inclusive,
                }) => {
                    let n = end_inclusive - start + 1;
                    accounting.record(n);
                    (
                        StatusCode::PARTIAL_CONTENT,
                        body::file(file, start, n),
                        Some(n),
                    )
                }
                Some(_) => {
                    return Answer::partial(
                        range_not_satisfiable(len),
                        Delivery::error(Some(provenance)),
                    )
                }
                None => {
                    accounting.record(len);
                    (status, body::file(file, 0, len), Some(len))
                }
            }
        }
        RepresentationBody::Stream { body, length } => (status, accounting.count(body), length),
    };

    if let Some(len) = length {
        headers.insert(header::CONTENT_LENGTH, decimal_value(len));
    }
    let body = if is_head {
        if let Some(whole) = &mut whole {
            whole.body = Bytes::new();
        }
        body::empty()
    } else {
        body
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    if status == StatusCode::PARTIAL_CONTENT {
        // A part is counted as it is: identity, nothing saved.
        delivery.original_len = None;
    }
    Answer {
        response,
        delivery,
        whole,
    }
}

/// What `respond` made of a representation.
pub struct Answer {
    pub response: Response<Body>,
    /// What it delivers, for the request's record.
    pub delivery: Delivery,
    /// The body as sent, when it was whole in memory (not a file or a stream) and the
    /// answer is not an error: what a prepared copy sends again.
    pub whole: Option<WholeBody>,
}

impl Answer {
    /// An answer whose body is not kept whole.
    fn partial(response: Response<Body>, delivery: Delivery) -> Answer {
        Answer {
            response,
            delivery,
            whole: None,
        }
    }
}

/// A body sent whole, and how it was counted into the metrics.
#[derive(Clone, Default)]
pub struct WholeBody {
    pub body: Bytes,
    counted: Option<CountedAgain>,
}

/// What a body sent again counts: its counters, held, and its sizes.
#[derive(Clone)]
struct CountedAgain {
    metrics: Arc<Metrics>,
    counters: BodyCounters,
    original: u64,
    sent: u64,
}

impl CountedAgain {
    fn count(&self) {
        self.metrics
            .record_body_with(&self.counters, self.original, self.sent);
    }
}

impl WholeBody {
    /// Counts `len` bytes of `body` as sent, keeping the counters for a repeat.
    fn counted(body: &Bytes, accounting: &Accounting, len: u64) -> WholeBody {
        let (original, sent) = accounting.sizes(len);
        let counted = CountedAgain {
            metrics: accounting.metrics.clone(),
            counters: accounting
                .metrics
                .body_counters(accounting.mechanism, accounting.content_type),
            original,
            sent,
        };
        counted.count();
        WholeBody {
            body: body.clone(),
            counted: Some(counted),
        }
    }

    /// Counts it into the metrics again, as sent again.
    pub fn count_again(&self) {
        if let Some(counted) = &self.counted {
            counted.count();
        }
    }
}

/// Whether a response offers the client a dictionary: itself (`Use-As-Dictionary`)
/// or another (`Link: <…>; rel="compression-dictionary"`).
fn announces_dictionary(headers: &HeaderMap) -> bool {
    headers.contains_key(USE_AS_DICTIONARY)
        || headers.get_all(header::LINK).iter().any(|link| {
            link.to_str()
                .is_ok_and(|l| l.contains("compression-dictionary"))
        })
}

/// The representation's validator, from the `instance`'s (its one valid `ETag`): an
/// encoding wirefold produced gets the coding appended and is weakened (levels may
/// differ between responses), so no cache confuses representations and the client's
/// revalidation maps back to it. A coded representation of an instance without one
/// (several `ETag` lines, or a malformed one) carries none.
fn representation_etag(
    headers: &mut HeaderMap,
    instance: Option<&EntityTag>,
    coding: &SentCoding,
) -> Option<EntityTag> {
    let token = match coding {
        SentCoding::Encoded(c) => c.token(),
        SentCoding::Dictionary(c) => c.token(),
        // An origin's own coding keeps its validator; a 226 names the new instance.
        SentCoding::Identity | SentCoding::Origin(_) | SentCoding::Vcdiff { .. } => {
            return instance.cloned()
        }
    };
    let Some(tag) = instance else {
        headers.remove(header::ETAG);
        return None;
    };
    let tag = EntityTag {
        weak: true,
        opaque: format!("{}-{}", tag.opaque, token),
    };
    headers.insert(header::ETAG, etag_value(&tag));
    Some(tag)
}

/// The validator in the request's `If-None-Match` that names `instance`: as is, or
/// as [`representation_etag`] suffixed it for a coding.
fn held_copy(request: &Preconditions, instance: &EntityTag) -> Option<EntityTag> {
    let Some(IfNoneMatch::Tags(tags)) = &request.if_none_match else {
        return None;
    };
    tags.iter()
        .find(
            |tag| match tag.opaque.strip_prefix(instance.opaque.as_str()) {
                Some("") => true,
                Some(rest) => {
                    let token = rest.strip_prefix('-').unwrap_or_default();
                    tag.weak
                        && (ContentCoding::from_token(token).is_some()
                            || DictionaryCoding::from_token(token).is_some())
                }
                None => false,
            },
        )
        .cloned()
}

fn range(
    rangeable: bool,
    request: &RangeFields,
    len: u64,
    etag: Option<&EntityTag>,
    last_modified: Option<std::time::SystemTime>,
    headers: &mut HeaderMap,
) -> Option<RangeRequest> {
    if !rangeable {
        return None;
    }
    match request.resolve(len, etag, last_modified) {
        RangeRequest::Full => None,
        single @ RangeRequest::Single {
            start,
            end_inclusive,
        } => {
            let value = content_range(start, end_inclusive, len);
            headers.insert(header::CONTENT_RANGE, value);
            Some(single)
        }
        RangeRequest::Unsatisfiable => Some(RangeRequest::Unsatisfiable),
    }
}

fn range_not_satisfiable(len: u64) -> Response<Body> {
    let mut r = error_response(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
    r.headers_mut()
        .insert(header::CONTENT_RANGE, unsatisfied_range(len));
    r
}

pub fn not_modified(full: &HeaderMap, held: Option<EntityTag>) -> Response<Body> {
    let mut response = Response::new(body::empty());
    *response.status_mut() = StatusCode::NOT_MODIFIED;
    for name in NOT_MODIFIED_FIELDS {
        for value in full.get_all(&name) {
            response.headers_mut().append(name.clone(), value.clone());
        }
    }
    if let Some(tag) = held.and_then(|t| HeaderValue::from_str(&t.to_string()).ok()) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

/// `Cache-Status` (RFC 9211) and `Age` (RFC 9111 §5.1) for what the cache did.
fn add_cache_status(headers: &mut HeaderMap, provenance: Provenance) {
    let age = |headers: &mut HeaderMap, age: Duration| {
        headers.insert(header::AGE, HeaderValue::from(age.as_secs()));
    };
    let status = match provenance {
        Provenance::Hit { age: a } => {
            age(headers, a);
            "wirefold; hit"
        }
        Provenance::Stale { age: a } => {
            age(headers, a);
            "wirefold; hit; detail=stale"
        }
        Provenance::Revalidated { age: a } => {
            age(headers, a);
            "wirefold; fwd=stale; fwd-status=304"
        }
        Provenance::Fetched { stored: true } => "wirefold; fwd=miss; stored",
        Provenance::Fetched { stored: false } => "wirefold; fwd=miss",
        Provenance::Bypass => "wirefold; fwd=bypass",
        Provenance::File => return,
    };
    headers.insert(
        HeaderName::from_static("cache-status"),
        HeaderValue::from_static(status),
    );
}

/// Counts a body's bytes into the per-mechanism metrics.
#[derive(Clone)]
struct Accounting {
    metrics: Arc<Metrics>,
    mechanism: &'static str,
    /// [`content_type_family`] of the body's media type.
    content_type: &'static str,
    original_len: Option<u64>,
    /// A HEAD request: the body is not sent, so nothing of it is counted.
    head: bool,
}

impl Accounting {
    fn record(&self, sent: u64) {
        let (original, sent) = self.sizes(sent);
        self.metrics
            .record_body(self.mechanism, self.content_type, original, sent);
    }

    /// What a body of `sent` bytes counts: before the encode stage, and sent.
    fn sizes(&self, sent: u64) -> (u64, u64) {
        let sent = if self.head { 0 } else { sent };
        (self.original_len.unwrap_or(sent), sent)
    }

    /// Wraps a stream so its size is recorded when it ends (or is dropped).
    fn count(self, body: Body) -> Body {
        body::counted(body, move |sent| self.record(sent.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_etags(lines: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(header::ETAG, HeaderValue::from_static(line));
        }
        headers
    }

    #[test]
    fn a_coded_representation_gets_its_own_etag_or_none() {
        let br = SentCoding::Encoded(ContentCoding::Br);
        let mut headers = with_etags(&["\"a1\""]);
        let instance = EntityTag::from_headers(&headers);
        let tag = representation_etag(&mut headers, instance.as_ref(), &br);
        assert_eq!(tag.map(|t| t.to_string()).as_deref(), Some("W/\"a1-br\""));
        assert_eq!(headers[header::ETAG], "W/\"a1-br\"");

        // Several lines name no instance: none of them goes out on a coded body.
        for lines in [&["\"a1\"", "\"b2\""][..], &["not a tag"]] {
            let mut headers = with_etags(lines);
            let instance = EntityTag::from_headers(&headers);
            assert_eq!(
                representation_etag(&mut headers, instance.as_ref(), &br),
                None
            );
            assert!(headers.get(header::ETAG).is_none(), "{lines:?}");
        }

        let mut headers = with_etags(&["\"a1\""]);
        let instance = EntityTag::from_headers(&headers);
        let tag = representation_etag(&mut headers, instance.as_ref(), &SentCoding::Identity);
        assert_eq!(tag, instance);
        assert_eq!(headers[header::ETAG], "\"a1\"");
    }
}
