//! Validators and conditional requests (RFC 9110 §8.8, §13): entity tags,
//! `If-None-Match`, and the precondition evaluation order of §13.2.2.
//!
//! Unparsable conditions are read in the direction that cannot do harm:
//! an unusable `If-None-Match` or `If-Modified-Since` just yields a full
//! response, while an `If-Match` with no usable tag fails.

use std::fmt;
use std::time::SystemTime;

use http::header::{
    HeaderMap, HeaderName, ETAG, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_UNMODIFIED_SINCE,
    LAST_MODIFIED,
};
use http::Method;

use crate::fields;

/// An entity tag: an opaque validator, strong (names exact bytes) or weak
/// (names semantically equivalent content).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EntityTag {
    pub weak: bool,
    /// The text between the quotes.
    pub opaque: String,
}

impl EntityTag {
    /// A strong tag for `opaque` (the text between the quotes).
    pub fn strong(opaque: impl Into<String>) -> Self {
        EntityTag {
            weak: false,
            opaque: opaque.into(),
        }
    }

    /// A weak tag for `opaque`; the proxy weakens an origin tag when it
    /// changes the bytes but not the meaning (e.g. a different coding).
    pub fn weak(opaque: impl Into<String>) -> Self {
        EntityTag {
            weak: true,
            opaque: opaque.into(),
        }
    }

    /// Parses `"opaque"` or `W/"opaque"` (surrounding whitespace allowed).
    /// The opaque part may hold any visible ASCII but `"`.
    pub fn parse(value: &str) -> Option<Self> {
        match parse_tag_prefix(value.trim()) {
            Some((tag, "")) => Some(tag),
            _ => None,
        }
    }

    /// The response's `ETag`, if it has exactly one valid one.
    pub fn from_headers(resp: &HeaderMap) -> Option<Self> {
        let mut lines = resp.get_all(ETAG).iter();
        let line = lines.next()?;
        if lines.next().is_some() {
            return None;
        }
        Self::parse(line.to_str().ok()?)
    }

    /// Weak comparison (RFC 9110 §8.8.3.2): the opaque parts are equal.
    pub fn weak_eq(&self, other: &EntityTag) -> bool {
        self.opaque == other.opaque
    }

    /// Strong comparison: both strong and the opaque parts are equal.
    pub fn strong_eq(&self, other: &EntityTag) -> bool {
        !self.weak && !other.weak && self.opaque == other.opaque
    }
}

impl fmt::Display for EntityTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.weak {
            f.write_str("W/")?;
        }
        write!(f, "\"{}\"", self.opaque)
    }
}

/// Parses one entity tag at the start of `input`, returning it and the rest.
fn parse_tag_prefix(input: &str) -> Option<(EntityTag, &str)> {
    let (weak, quoted) = match input.strip_prefix("W/") {
        Some(rest) => (true, rest),
        None => (false, input),
    };
    let body = quoted.strip_prefix('"')?;
    let end = body.find('"')?;
    let opaque = &body[..end];
    // etagc = %x21 / %x23-7E / obs-text; obs-text cannot reach us as `str`
    // from a header we decoded with `to_str`, so visible ASCII is the rule.
    if !opaque.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    Some((
        EntityTag {
            weak,
            opaque: opaque.to_owned(),
        },
        &body[end + 1..],
    ))
}

/// An `If-None-Match` (or, with the same syntax, `If-Match`) value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfNoneMatch {
    /// `*`: matches any current representation.
    Any,
    /// The listed tags; malformed members are dropped, so this may be empty.
    Tags(Vec<EntityTag>),
}

impl IfNoneMatch {
    /// Reads every `If-None-Match` line; `None` when the field is absent.
    pub fn from_headers(req: &HeaderMap) -> Option<Self> {
        tag_condition(req, &IF_NONE_MATCH)
    }

    /// Parses a list of entity tags or `*`, skipping malformed members.
    /// Commas inside a tag's quotes are part of the tag.
    pub fn parse(value: &str) -> Self {
        let mut tags = Vec::new();
        let mut rest = value;
        loop {
            rest = rest.trim_start_matches(|c: char| c == ',' || c.is_ascii_whitespace());
            if rest.is_empty() {
                return IfNoneMatch::Tags(tags);
            }
            if let Some(after_star) = rest.strip_prefix('*') {
                if after_star.trim_start().is_empty() || after_star.trim_start().starts_with(',') {
                    return IfNoneMatch::Any;
                }
            }
            match parse_tag_prefix(rest) {
                Some((tag, after)) => {
                    tags.push(tag);
                    rest = after;
                }
                // Skip the malformed member up to the next comma.
                None => rest = rest.find(',').map_or("", |comma| &rest[comma..]),
            }
        }
    }

    /// Whether a current representation with `etag` matches, by weak
    /// comparison as `If-None-Match` requires. Call this only when a
    /// representation exists: `*` matches it even without an `ETag`.
    pub fn matches(&self, etag: Option<&EntityTag>) -> bool {
        match self {
            IfNoneMatch::Any => true,
            IfNoneMatch::Tags(tags) => {
                etag.is_some_and(|etag| tags.iter().any(|t| t.weak_eq(etag)))
            }
        }
    }
}

/// Reads `name` as a list of entity tags. Lines that are not visible ASCII
/// contribute nothing: such a tag could never equal one we parsed.
fn tag_condition(req: &HeaderMap, name: &HeaderName) -> Option<IfNoneMatch> {
    let mut lines = req.get_all(name).iter().peekable();
    lines.peek()?;
    let joined: Vec<&str> = lines.filter_map(|line| line.to_str().ok()).collect();
    Some(IfNoneMatch::parse(&joined.join(",")))
}

/// The response's `Last-Modified`, if present once and valid.
pub fn last_modified(resp: &HeaderMap) -> Option<SystemTime> {
    fields::http_date(resp, &LAST_MODIFIED)
}

/// The outcome of evaluating a request's preconditions against the stored
/// representation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// No condition stops the request: serve it normally.
    Proceed,
    /// Answer `304 Not Modified` (GET/HEAD only).
    NotModified,
    /// Answer `412 Precondition Failed`.
    Failed,
}

/// A request's preconditions (RFC 9110 §13.1), parsed once, at the edge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    pub if_match: Option<IfNoneMatch>,
    pub if_none_match: Option<IfNoneMatch>,
    /// Present once and valid; an invalid or repeated date is ignored (§13.1.3).
    pub if_modified_since: Option<SystemTime>,
    /// Present once and valid; an invalid or repeated date is ignored (§13.1.4).
    pub if_unmodified_since: Option<SystemTime>,
}

impl Preconditions {
    pub fn from_headers(req: &HeaderMap) -> Self {
        Preconditions {
            if_match: tag_condition(req, &IF_MATCH),
            if_none_match: IfNoneMatch::from_headers(req),
            if_modified_since: fields::http_date(req, &IF_MODIFIED_SINCE),
            if_unmodified_since: fields::http_date(req, &IF_UNMODIFIED_SINCE),
        }
    }

    /// Evaluates the request's preconditions in RFC 9110 §13.2.2 order against the selected
    /// representation's validators (it is assumed to exist):
    /// 1. `If-Match` (strong comparison; `*` matches) — false → `Failed`;
    /// 2. else `If-Unmodified-Since` — modified since → `Failed`;
    /// 3. `If-None-Match` (weak comparison) — matches → `NotModified` for
    ///    GET/HEAD, `Failed` otherwise;
    /// 4. else, for GET/HEAD, `If-Modified-Since` — not modified since →
    ///    `NotModified`.
    ///
    /// Date conditions are ignored when the date is invalid or repeated, or the
    /// representation has no `last_modified` (§13.1.3, §13.1.4). Dates are
    /// compared in whole seconds, the precision of HTTP dates.
    pub fn evaluate(
        &self,
        method: &Method,
        etag: Option<&EntityTag>,
        last_modified: Option<SystemTime>,
    ) -> Precondition {
        let modified_secs = last_modified.map(fields::unix_seconds);
        let date_condition =
            |since: Option<SystemTime>| Some((modified_secs?, fields::unix_seconds(since?)));

        match &self.if_match {
            Some(IfNoneMatch::Any) => {}
            Some(IfNoneMatch::Tags(tags)) => {
                if !etag.is_some_and(|etag| tags.iter().any(|t| t.strong_eq(etag))) {
                    return Precondition::Failed;
                }
            }
            None => {
                if date_condition(self.if_unmodified_since)
                    .is_some_and(|(modified, since)| modified > since)
                {
                    return Precondition::Failed;
                }
            }
        }

        let safe = method == Method::GET || method == Method::HEAD;
        match &self.if_none_match {
            Some(condition) if condition.matches(etag) => {
                if safe {
                    Precondition::NotModified
                } else {
                    Precondition::Failed
                }
            }
            Some(_) => Precondition::Proceed,
            None if safe
                && date_condition(self.if_modified_since)
                    .is_some_and(|(modified, since)| modified <= since) =>
            {
                Precondition::NotModified
            }
            None => Precondition::Proceed,
        }
    }
}

/// [`Preconditions::evaluate`] for a request's fields, for callers that hold them
/// unparsed (a client checking its own cache).
pub fn evaluate(
    method: &Method,
    req: &HeaderMap,
    etag: Option<&EntityTag>,
    last_modified: Option<SystemTime>,
) -> Precondition {
    Preconditions::from_headers(req).evaluate(method, etag, last_modified)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    use crate::fields::test_map as map;

    fn date(secs: u64) -> String {
        fields::format_http_date(UNIX_EPOCH + Duration::from_secs(secs)).unwrap()
    }

    const MODIFIED: u64 = 1_700_000_000;

    fn eval(method: &Method, req: &[(&str, &[u8])]) -> Precondition {
        let etag = EntityTag::strong("v1");
        let modified = UNIX_EPOCH + Duration::from_millis(MODIFIED * 1000 + 600);
        evaluate(method, &map(req), Some(&etag), Some(modified))
    }

    #[test]
    fn entity_tag_parse_and_display() {
        assert_eq!(EntityTag::parse("\"abc\""), Some(EntityTag::strong("abc")));
        assert_eq!(
            EntityTag::parse(" W/\"a,b\" "),
            Some(EntityTag::weak("a,b"))
        );
        assert_eq!(EntityTag::parse("\"\""), Some(EntityTag::strong("")));
        for bad in [
            "abc",
            "\"abc",
            "w/\"abc\"",
            "W/abc",
            "\"a\"b",
            "\"a b\"",
            "\"é\"",
            "",
            "W/",
        ] {
            assert_eq!(EntityTag::parse(bad), None, "{bad}");
        }
        assert_eq!(EntityTag::weak("x").to_string(), "W/\"x\"");
        assert_eq!(EntityTag::strong("x").to_string(), "\"x\"");
    }

    #[test]
    fn entity_tag_comparisons() {
        let (strong, weak) = (EntityTag::strong("1"), EntityTag::weak("1"));
        assert!(strong.strong_eq(&strong));
        assert!(!strong.strong_eq(&weak) && !weak.strong_eq(&weak));
        assert!(strong.weak_eq(&weak) && weak.weak_eq(&weak));
        assert!(!strong.weak_eq(&EntityTag::strong("2")));
    }

    #[test]
    fn entity_tag_from_headers() {
        assert_eq!(
            EntityTag::from_headers(&map(&[("etag", b"W/\"x\"")])),
            Some(EntityTag::weak("x"))
        );
        assert_eq!(
            EntityTag::from_headers(&map(&[("etag", b"\"\xff\"")])),
            None
        );
        assert_eq!(
            EntityTag::from_headers(&map(&[("etag", b"\"a\""), ("etag", b"\"b\"")])),
            None
        );
        assert_eq!(EntityTag::from_headers(&HeaderMap::new()), None);
    }

    #[test]
    fn if_none_match_lists() {
        assert_eq!(IfNoneMatch::parse(" * "), IfNoneMatch::Any);
        assert_eq!(
            IfNoneMatch::parse("\"a\",W/\"b\" , junk, \"c,d\",,\"e"),
            IfNoneMatch::Tags(vec![
                EntityTag::strong("a"),
                EntityTag::weak("b"),
                EntityTag::strong("c,d")
            ])
        );
        assert_eq!(IfNoneMatch::parse(""), IfNoneMatch::Tags(vec![]));
        assert_eq!(
            IfNoneMatch::parse("*x, \"a\""),
            IfNoneMatch::Tags(vec![EntityTag::strong("a")])
        );
        let req = map(&[
            ("if-none-match", b"\"a\""),
            ("if-none-match", b"\"\xff\""),
            ("if-none-match", b"W/\"b\""),
        ]);
        assert_eq!(
            IfNoneMatch::from_headers(&req),
            Some(IfNoneMatch::Tags(vec![
                EntityTag::strong("a"),
                EntityTag::weak("b")
            ]))
        );
        assert_eq!(IfNoneMatch::from_headers(&HeaderMap::new()), None);
    }

    #[test]
    fn if_none_match_uses_weak_comparison() {
        assert_eq!(
            eval(&Method::GET, &[("if-none-match", b"W/\"v1\"")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(&Method::HEAD, &[("if-none-match", b"\"v0\", \"v1\"")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(&Method::GET, &[("if-none-match", b"*")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(&Method::GET, &[("if-none-match", b"\"v2\"")]),
            Precondition::Proceed
        );
        assert_eq!(
            eval(&Method::PUT, &[("if-none-match", b"*")]),
            Precondition::Failed
        );
        assert_eq!(
            evaluate(
                &Method::GET,
                &map(&[("if-none-match", b"\"v1\"")]),
                None,
                None
            ),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_match_uses_strong_comparison() {
        assert_eq!(
            eval(&Method::PUT, &[("if-match", b"\"v1\"")]),
            Precondition::Proceed
        );
        assert_eq!(
            eval(&Method::PUT, &[("if-match", b"*")]),
            Precondition::Proceed
        );
        assert_eq!(
            eval(&Method::PUT, &[("if-match", b"W/\"v1\"")]),
            Precondition::Failed
        );
        assert_eq!(
            eval(&Method::PUT, &[("if-match", b"garbage")]),
            Precondition::Failed
        );
        assert_eq!(
            eval(&Method::GET, &[("if-match", b"\"v2\"")]),
            Precondition::Failed
        );
        // If-Match true: If-Unmodified-Since is skipped, If-None-Match still applies.
        let old = date(MODIFIED - 100);
        let req = [
            ("if-match", &b"\"v1\""[..]),
            ("if-unmodified-since", old.as_bytes()),
            ("if-none-match", b"\"v1\""),
        ];
        assert_eq!(eval(&Method::GET, &req), Precondition::NotModified);
    }

    #[test]
    fn if_unmodified_since() {
        assert_eq!(
            eval(
                &Method::PUT,
                &[("if-unmodified-since", date(MODIFIED).as_bytes())]
            ),
            Precondition::Proceed
        );
        assert_eq!(
            eval(
                &Method::PUT,
                &[("if-unmodified-since", date(MODIFIED - 1).as_bytes())]
            ),
            Precondition::Failed
        );
        assert_eq!(
            eval(&Method::PUT, &[("if-unmodified-since", b"garbage")]),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_modified_since() {
        assert_eq!(
            eval(
                &Method::GET,
                &[("if-modified-since", date(MODIFIED).as_bytes())]
            ),
            Precondition::NotModified
        );
        assert_eq!(
            eval(
                &Method::GET,
                &[("if-modified-since", date(MODIFIED + 9).as_bytes())]
            ),
            Precondition::NotModified
        );
        assert_eq!(
            eval(
                &Method::GET,
                &[("if-modified-since", date(MODIFIED - 1).as_bytes())]
            ),
            Precondition::Proceed
        );
        assert_eq!(
            eval(
                &Method::POST,
                &[("if-modified-since", date(MODIFIED).as_bytes())]
            ),
            Precondition::Proceed
        );
        let twice = date(MODIFIED);
        let req = [
            ("if-modified-since", twice.as_bytes()),
            ("if-modified-since", twice.as_bytes()),
        ];
        assert_eq!(eval(&Method::GET, &req), Precondition::Proceed);
        assert_eq!(
            eval(&Method::GET, &[("if-modified-since", b"\xff\xfe")]),
            Precondition::Proceed
        );
        let without_date = evaluate(
            &Method::GET,
            &map(&[("if-modified-since", twice.as_bytes())]),
            None,
            None,
        );
        assert_eq!(without_date, Precondition::Proceed);
    }

    #[test]
    fn if_none_match_overrides_if_modified_since() {
        let since = date(MODIFIED);
        let req = [
            ("if-none-match", &b"\"v2\""[..]),
            ("if-modified-since", since.as_bytes()),
        ];
        assert_eq!(eval(&Method::GET, &req), Precondition::Proceed);
    }

    #[test]
    fn last_modified_reads_a_single_valid_date() {
        let when = date(MODIFIED);
        assert_eq!(
            last_modified(&map(&[("last-modified", when.as_bytes())])).map(fields::unix_seconds),
            Some(MODIFIED)
        );
        assert_eq!(last_modified(&map(&[("last-modified", b"soon")])), None);
    }
}
