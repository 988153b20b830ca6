//! `Accept-Encoding` (RFC 9110 §12.5.3): which content codings the client
//! accepts, with what preference, so the proxy can pick one to send.
//!
//! Parsing is lenient because real clients send odd values: a member with a
//! malformed or out-of-grammar q-value is dropped rather than guessed at, since
//! guessing could send a coding the client cannot decode.

use std::borrow::{Borrow, Cow};

use crate::ContentCoding;
use http::header::{HeaderMap, ACCEPT_ENCODING};

use crate::fields;

const IDENTITY: &str = "identity";
const ANY: &str = "*";

/// A parsed `Accept-Encoding` request header.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AcceptEncoding {
    /// Whether the request carried the header at all. RFC 9110 lets an absent
    /// header mean "anything", but many clients that omit it cannot decode, so
    /// wirefold treats absence as "identity only", like common servers do.
    present: bool,
    /// `(lowercase token, q)` in header order; `x-gzip` is stored as `gzip`.
    entries: Vec<(Cow<'static, str>, f32)>,
}

impl AcceptEncoding {
    /// Reads every `Accept-Encoding` line of a request.
    pub fn from_headers(headers: &HeaderMap) -> Self {
        match fields::combined(headers, ACCEPT_ENCODING) {
            Some(value) => Self::parse(&value),
            None => Self::default(),
        }
    }

    /// Parses one (possibly combined) header value. An empty value is a
    /// present header that accepts no coding but identity.
    pub fn parse(value: &str) -> Self {
        let entries = fields::split_list(value).filter_map(parse_member).collect();
        AcceptEncoding {
            present: true,
            entries,
        }
    }

    /// Whether the request carried an `Accept-Encoding` header.
    pub fn is_present(&self) -> bool {
        self.present
    }

    /// The client's quality value for `token` (case-insensitive): its own
    /// entry if listed (the first one if listed twice), else the `*` entry,
    /// else 1.0 for `identity` and 0.0 for anything else. `identity` is only
    /// excluded by `identity;q=0`, or by `*;q=0` without an `identity` entry.
    pub fn quality(&self, token: &str) -> f32 {
        let token = normalize_token(token);
        if let Some(q) = self.entry(&token) {
            return q;
        }
        if let Some(q) = self.entry(ANY) {
            return q;
        }
        if token == IDENTITY {
            1.0
        } else {
            0.0
        }
    }

    /// Whether the client can decode `coding`.
    pub fn accepts(&self, coding: ContentCoding) -> bool {
        self.accepts_token(coding.token())
    }

    /// Whether the client accepts the coding named `token`, including codings
    /// outside [`ContentCoding`] such as the dictionary codings `dcb`/`dcz`.
    pub fn accepts_token(&self, token: &str) -> bool {
        self.quality(token) > 0.0
    }

    /// Whether an unencoded response is acceptable. When it is not and no
    /// coding can be negotiated either, RFC 9110 allows sending identity
    /// anyway or answering 415; that choice belongs to the caller.
    pub fn identity_acceptable(&self) -> bool {
        self.accepts_token(IDENTITY)
    }

    /// Picks the coding to send: among `preference` (the server's order),
    /// the one with the highest q > 0, ties going to the earlier entry.
    /// `None` means send identity: the header was absent, nothing in
    /// `preference` is acceptable, or the client explicitly rated `identity`
    /// above every acceptable coding (e.g. `gzip;q=0.5, identity`).
    pub fn negotiate<P>(&self, preference: P) -> Option<ContentCoding>
    where
        P: IntoIterator,
        P::Item: Borrow<ContentCoding>,
    {
        let mut best: Option<(ContentCoding, f32)> = None;
        for coding in preference {
            let coding = *coding.borrow();
            let q = self.quality(coding.token());
            if q > 0.0 && best.is_none_or(|(_, best_q)| q > best_q) {
                best = Some((coding, q));
            }
        }
        let (coding, q) = best?;
        match self.entry(IDENTITY) {
            Some(identity_q) if identity_q > q => None,
            _ => Some(coding),
        }
    }

    fn entry(&self, token: &str) -> Option<f32> {
        self.entries
            .iter()
            .find(|(t, _)| t == token)
            .map(|&(_, q)| q)
    }
}

/// Parses `token *( OWS ";" OWS name=value )`; `None` for a malformed member.
fn parse_member(member: &str) -> Option<(Cow<'static, str>, f32)> {
    let mut parts = member.split(';');
    let token = parts.next()?.trim();
    if token.is_empty() || !token.bytes().all(is_tchar) {
        return None;
    }
    let mut q = 1.0;
    for param in parts {
        let (name, value) = fields::split_assignment(param);
        if name.eq_ignore_ascii_case("q") {
            q = parse_qvalue(value?)?;
        }
    }
    Some((kept(normalize_token(token)), q))
}

/// A q-value: digits with at most one dot (so no `1e-1`, `inf`, `NaN` or
/// signs), clamped to 0..=1. Precision beyond the RFC's three decimals is
/// tolerated.
fn parse_qvalue(value: &str) -> Option<f32> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits_only(whole) || !digits_only(fraction) {
        return None;
    }
    let q: f32 = value.parse().ok()?;
    Some(q.clamp(0.0, 1.0))
}

/// Lowercases a coding token and maps the `x-gzip`/`x-compress` aliases
/// (RFC 9110 §8.4.1.1, §8.4.1.3) to their registered names. A token already in
/// that form is borrowed.
fn normalize_token(token: &str) -> Cow<'_, str> {
    let lower = fields::ascii_lowercase(token.trim());
    match lower.strip_prefix("x-") {
        Some("gzip") => Cow::Borrowed("gzip"),
        Some("compress") => Cow::Borrowed("compress"),
        _ => lower,
    }
}

/// Tokens clients send besides [`ContentCoding`]'s, kept as themselves: parsing a
/// usual `Accept-Encoding` copies nothing.
const OTHER_KNOWN_TOKENS: [&str; 5] = ["dcb", "dcz", IDENTITY, ANY, "compress"];

/// A normalized `token` for keeping: a known one as its static name, another as a
/// copy.
fn kept(token: Cow<'_, str>) -> Cow<'static, str> {
    if let Some(coding) = ContentCoding::from_token(&token) {
        return Cow::Borrowed(coding.token());
    }
    match OTHER_KNOWN_TOKENS.iter().find(|known| **known == token) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(token.into_owned()),
    }
}

/// RFC 9110 §5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use ContentCoding::*;

    const SERVER_ORDER: [ContentCoding; 4] = [Br, Zstd, Gzip, Deflate];

    #[test]
    fn browser_header_negotiates_first_preference() {
        let ae = AcceptEncoding::parse("gzip, deflate, br, zstd");
        assert_eq!(ae.negotiate(SERVER_ORDER), Some(Br));
        assert_eq!(ae.negotiate([Gzip, Br]), Some(Gzip));
        assert!(ae.identity_acceptable());
    }

    #[test]
    fn higher_q_beats_server_order() {
        let ae = AcceptEncoding::parse("br;q=0.5, gzip;q=0.9, zstd;q=0");
        assert_eq!(ae.negotiate(SERVER_ORDER), Some(Gzip));
        assert!(!ae.accepts(Zstd));
        assert_eq!(ae.quality("BR"), 0.5);
    }

    #[test]
    fn absent_header_means_identity() {
        let ae = AcceptEncoding::from_headers(&HeaderMap::new());
        assert!(!ae.is_present());
        assert_eq!(ae.negotiate(SERVER_ORDER), None);
        assert!(!ae.accepts(Gzip));
        assert!(ae.identity_acceptable());
    }

    #[test]
    fn empty_header_accepts_only_identity() {
        let ae = AcceptEncoding::parse("");
        assert!(ae.is_present());
        assert_eq!(ae.negotiate(SERVER_ORDER), None);
        assert!(ae.identity_acceptable());
    }

    #[test]
    fn wildcard_and_identity_exclusion() {
        let ae = AcceptEncoding::parse("*;q=0.3, br;q=0");
        assert_eq!(ae.quality("gzip"), 0.3);
        assert_eq!(ae.quality("dcz"), 0.3);
        assert_eq!(ae.quality("identity"), 0.3);
        assert_eq!(ae.negotiate(SERVER_ORDER), Some(Zstd));

        assert!(!AcceptEncoding::parse("*;q=0").identity_acceptable());
        assert!(!AcceptEncoding::parse("gzip, identity;q=0").identity_acceptable());
        assert!(AcceptEncoding::parse("*;q=0, identity").identity_acceptable());
        assert_eq!(AcceptEncoding::parse("*;q=0").negotiate(SERVER_ORDER), None);
    }

    #[test]
    fn explicit_identity_preference_wins() {
        assert_eq!(
            AcceptEncoding::parse("gzip;q=0.5, identity").negotiate([Gzip]),
            None
        );
        assert_eq!(
            AcceptEncoding::parse("gzip;q=0.5").negotiate([Gzip]),
            Some(Gzip)
        );
        assert_eq!(
            AcceptEncoding::parse("gzip, identity;q=0.5").negotiate([Gzip]),
            Some(Gzip)
        );
    }

    #[test]
    fn aliases_case_and_unknown_tokens() {
        let ae = AcceptEncoding::parse("X-GZIP, DCZ;Q=0.8");
        assert!(ae.accepts(Gzip));
        assert!(ae.accepts_token("dcz"));
        assert!(ae.accepts_token("Dcz"));
        assert!(!ae.accepts_token("dcb"));
        assert!(!ae.accepts(Br));
    }

    #[test]
    fn hostile_values_are_ignored_not_guessed() {
        let ae = AcceptEncoding::parse(
            "br;q=abc, zstd;q=1e-1, gzip;q=, deflate;q=-1, ;q=1, g zip, \"gzip\", compress;q=nan",
        );
        assert_eq!(ae.negotiate(SERVER_ORDER), None);
        assert!(!ae.accepts_token("compress"));
        let ae = AcceptEncoding::parse("  gzip ;  q=7  ,,, br;q=0.0001;level=9 ,");
        assert_eq!(ae.quality("gzip"), 1.0);
        assert!(ae.accepts(Br));
        assert_eq!(ae.negotiate(SERVER_ORDER), Some(Gzip));
    }

    #[test]
    fn duplicate_entries_use_the_first() {
        let ae = AcceptEncoding::parse("gzip;q=0, gzip");
        assert!(!ae.accepts(Gzip));
    }

    #[test]
    fn multiple_lines_and_non_utf8_bytes() {
        let mut headers = HeaderMap::new();
        headers.append(ACCEPT_ENCODING, HeaderValue::from_static("gzip;q=0.5"));
        headers.append(
            ACCEPT_ENCODING,
            HeaderValue::from_bytes(b"\xe9\xff;q=1, br").unwrap(),
        );
        let ae = AcceptEncoding::from_headers(&headers);
        assert_eq!(ae.negotiate(SERVER_ORDER), Some(Br));
        assert!(ae.accepts(Gzip));
    }
}
