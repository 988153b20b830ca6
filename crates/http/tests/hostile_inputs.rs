//! Every public parser and rule must accept any header bytes without
//! panicking. Header values are generated from fragments that tend to hit
//! edge cases (quotes, commas, signs, huge numbers, non-UTF-8), by a fixed
//! seed so failures reproduce.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use wirefold_http::ContentCoding;
use wirefold_http::{
    caching, conditional, range, vary, AcceptEncoding, CacheControl, EntityTag, Freshness,
    IfNoneMatch,
};

const FRAGMENTS: &[&[u8]] = &[
    b"\"",
    b"\\",
    b",",
    b";",
    b"=",
    b" ",
    b"\t",
    b"*",
    b"-",
    b"W/",
    b"q=",
    b"0",
    b"1",
    b".",
    b"abc",
    b"99999999999999999999",
    b"max-age",
    b"s-maxage",
    b"no-cache",
    b"max-stale",
    b"bytes=",
    b"gzip",
    b"br",
    b"identity",
    b"upgrade",
    b"\xff",
    b"\xc3\xa9",
    b"\x80",
    b"Sun, 06 Nov 1994 08:49:37 GMT",
    b"\"v1\"",
    b"accept-encoding",
    b"connection",
    b"",
    b"e+5",
    b"nan",
];

const FIELDS: &[&str] = &[
    "accept-encoding",
    "cache-control",
    "pragma",
    "vary",
    "etag",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
    "range",
    "connection",
    "upgrade",
    "age",
    "date",
    "expires",
    "last-modified",
    "authorization",
    "set-cookie",
    "keep-alive",
];

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn value(&mut self) -> HeaderValue {
        let mut bytes = Vec::new();
        for _ in 0..self.below(8) {
            bytes.extend_from_slice(FRAGMENTS[self.below(FRAGMENTS.len())]);
        }
        HeaderValue::from_bytes(&bytes).expect("fragments hold only valid header bytes")
    }

    fn headers(&mut self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for _ in 0..self.below(10) {
            let name = HeaderName::from_static(FIELDS[self.below(FIELDS.len())]);
            headers.append(name, self.value());
        }
        headers
    }

    fn time(&mut self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.next() % 4_000_000_000)
    }
}

#[test]
fn no_panic_on_generated_headers() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let methods = [Method::GET, Method::HEAD, Method::POST, Method::PUT];
    for _ in 0..20_000 {
        let req = rng.headers();
        let resp = rng.headers();
        let method = &methods[rng.below(methods.len())];
        let status = StatusCode::from_u16(100 + rng.below(500) as u16).unwrap();
        let (t1, t2, now) = (rng.time(), rng.time(), rng.time());
        let text = String::from_utf8_lossy(rng.value().as_bytes()).into_owned();

        let ae = AcceptEncoding::from_headers(&req);
        let _ = AcceptEncoding::parse(&text).negotiate(&ContentCoding::ALL);
        let _ = (
            ae.negotiate(&ContentCoding::ALL),
            ae.identity_acceptable(),
            ae.accepts_token(&text),
        );

        let req_cc = CacheControl::from_headers(&req);
        let resp_cc = CacheControl::from_headers(&resp);
        let _ = CacheControl::parse(&text);
        let _ = caching::check_storable(method, &req, status, &resp);
        let fresh = Freshness::new(status, &resp, t1, t2);
        let _ = caching::reuse(&fresh, &resp_cc, &req_cc, now);
        let _ = caching::may_serve_stale_on_error(&fresh, &resp_cc, &req_cc, now);
        let (a, b, c) = fresh.to_parts();
        assert_eq!(Freshness::from_parts(a, b, c).to_parts(), (a, b, c));
        let mut stored = resp.clone();
        let _ = Freshness::updated_from_304(status, &mut stored, &req, t1, now);

        let vary = vary::Vary::from_headers(&resp);
        let _ = vary.secondary_key(&req, &[http::header::ACCEPT_ENCODING]);
        vary::add_field(&mut stored, &text);

        let etag = EntityTag::from_headers(&resp);
        let _ = EntityTag::parse(&text).map(|t| t.to_string());
        let _ = IfNoneMatch::from_headers(&req);
        let modified = conditional::last_modified(&resp);
        let _ = conditional::evaluate(method, &req, etag.as_ref(), modified);
        let len = [0, 1, 10, u64::MAX][rng.below(4)];
        if let range::RangeRequest::Single {
            start,
            end_inclusive,
        } = range::range_for(&req, len, etag.as_ref(), modified)
        {
            assert!(start <= end_inclusive && end_inclusive < len);
        }

        let mut forwarded = req.clone();
        wirefold_http::remove_hop_by_hop(&mut forwarded);
        assert!(!forwarded.contains_key(http::header::CONNECTION));
        let _ = wirefold_http::is_upgrade_request(&req);
    }
}
