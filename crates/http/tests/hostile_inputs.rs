//! Every public parser and rule must accept any header bytes without
//! panicking. Header values are generated from fragments that tend to hit
//! edge cases (quotes, commas, signs, huge numbers, non-UTF-8), or for
//! Client Hints also from arbitrary bytes, by a fixed seed so failures
//! reproduce.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use wirefold_http::ContentCoding;
use wirefold_http::{
    caching, client_hints, conditional, range, vary, AcceptEncoding, CacheControl, ClientHints,
    EntityTag, Freshness, IfNoneMatch,
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
    b"on",
    b"reduce",
    b"4g",
    b"slow-2g",
    b"2.625",
    b"100001",
    b"?1",
    b":",
    b"999999999999.999",
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
    "save-data",
    "sec-ch-prefers-reduced-data",
    "ect",
    "rtt",
    "downlink",
    "sec-ch-dpr",
    "dpr",
    "sec-ch-viewport-width",
    "sec-ch-width",
    "device-memory",
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

    /// Up to 40 arbitrary bytes a header value may hold (anything but
    /// controls other than tab, and DEL), so also lone UTF-8 fragments.
    fn raw_value(&mut self) -> HeaderValue {
        let len = self.below(41);
        let mut bytes = Vec::with_capacity(len);
        while bytes.len() < len {
            let b = self.next() as u8;
            if b == b'\t' || (b >= 0x20 && b != 0x7f) {
                bytes.push(b);
            }
        }
        HeaderValue::from_bytes(&bytes).expect("only valid header bytes")
    }

    /// An RFC 8941-like number, often out of its grammar or bounds: a sign,
    /// up to 17 digits, sometimes a dot and up to 4 more, sometimes a parameter.
    fn number(&mut self) -> Vec<u8> {
        let mut bytes = Vec::new();
        if self.below(8) == 0 {
            bytes.push(b'-');
        }
        let digit = |rng: &mut Self| b'0' + rng.below(10) as u8;
        for _ in 0..self.below(18) {
            bytes.push(digit(self));
        }
        if self.below(2) == 0 {
            bytes.push(b'.');
            for _ in 0..self.below(5) {
                bytes.push(digit(self));
            }
        }
        if self.below(8) == 0 {
            bytes.extend_from_slice(b";a=1");
        }
        bytes
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
        let _ = AcceptEncoding::parse(&text).negotiate(ContentCoding::ALL);
        let _ = (
            ae.negotiate(ContentCoding::ALL),
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

        check_hints(&ClientHints::from_headers(&req));

        let mut forwarded = req.clone();
        wirefold_http::remove_hop_by_hop(&mut forwarded);
        assert!(!forwarded.contains_key(http::header::CONNECTION));
        let _ = wirefold_http::is_upgrade_request(&req);
    }
}

const TOKENS: &[&[u8]] = &[
    b"on",
    b"off",
    b"reduce",
    b"no-preference",
    b"slow-2g",
    b"2g",
    b"3g",
    b"4g",
];

/// What every [`ClientHints`] promises, whatever the request held.
fn check_hints(hints: &ClientHints) {
    if let Some(dpr) = hints.dpr {
        assert!(dpr > 0.0 && dpr <= client_hints::MAX_DPR, "{dpr}");
    }
    for width in [hints.width, hints.viewport_width].into_iter().flatten() {
        assert!((1..=client_hints::MAX_WIDTH).contains(&width), "{width}");
    }
    if let Some(memory) = hints.device_memory_gib {
        assert!(memory.is_finite() && memory > 0.0, "{memory}");
    }
    assert!(hints.rtt_ms.is_none_or(|ms| ms < 1_000_000_000_000_000));
    assert!(hints
        .downlink_kbps
        .is_none_or(|k| k < 1_000_000_000_000_000_000));
}

#[test]
fn client_hints_hold_their_bounds_on_arbitrary_bytes() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let mut known = 0;
    for _ in 0..20_000 {
        let mut headers = HeaderMap::new();
        for _ in 0..1 + rng.below(4) {
            let field =
                client_hints::ACCEPT_CH_FIELDS[rng.below(client_hints::ACCEPT_CH_FIELDS.len())];
            let mut bytes = match rng.below(4) {
                0 => rng.raw_value().as_bytes().to_vec(),
                1 => rng.value().as_bytes().to_vec(),
                2 => rng.number(),
                _ => TOKENS[rng.below(TOKENS.len())].to_vec(),
            };
            if rng.below(4) == 0 {
                bytes.extend_from_slice(rng.raw_value().as_bytes());
            }
            let value = HeaderValue::from_bytes(&bytes).expect("only valid header bytes");
            headers.append(HeaderName::from_static(field), value);
        }
        let hints = ClientHints::from_headers(&headers);
        check_hints(&hints);
        known += usize::from(hints.any());
    }
    // The bounds above were checked on real values, not only on `None`s.
    assert!(known > 1_000, "{known}");
}
