//! `Cache-Control` (RFC 9111 §5.2, RFC 5861, RFC 8246), parsed once into
//! flags and durations that the `caching` rules read.
//!
//! One type serves requests and responses: the directive syntax is shared, and
//! each rule reads only the fields meaningful for its side.
//!
//! Ambiguity is resolved towards the safer reading, because a cache that is
//! too eager serves content the origin did not intend:
//! - A duplicated delta-seconds directive keeps its most restrictive value
//!   (RFC 9111 §4.2.1 allows this or treating the response as stale):
//!   the smallest `max-age`, `s-maxage`, `max-stale`, `stale-while-revalidate`
//!   and `stale-if-error`, and the largest `min-fresh`. A bounded `max-stale=n`
//!   beats a bare `max-stale`.
//! - An invalid `max-age` or `s-maxage` value counts as 0, because RFC 9111
//!   §4.2.1 encourages treating invalid freshness information as stale and
//!   ignoring it would let `Expires` or the heuristic make the response fresh.
//!   Other directives with invalid values are ignored, which for them is the
//!   restrictive choice (no extra staleness allowed, no `min-fresh`).
//! - Qualified `no-cache="field"` and `private="field"` act as their
//!   unqualified forms: wirefold does not store partial header sets.
//! - Values above 2^31 seconds saturate there (RFC 9111 §1.2.2).

use http::header::{HeaderMap, CACHE_CONTROL, PRAGMA};

use crate::fields;

/// The directives of a `Cache-Control` field. Unknown directives are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    pub no_store: bool,
    pub no_cache: bool,
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub no_transform: bool,
    pub immutable: bool,
    pub must_understand: bool,
    pub only_if_cached: bool,
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    pub min_fresh: Option<u64>,
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
    /// `Some(None)`: the client accepts any staleness (bare `max-stale`).
    pub max_stale: Option<Option<u64>>,
}

impl CacheControl {
    /// Reads every `Cache-Control` line. Without `Cache-Control`, a
    /// `Pragma: no-cache` counts as `no-cache` (RFC 9111 §5.4 requires this
    /// for requests; applying it to responses too only makes wirefold
    /// revalidate more often, never serve something it should not).
    pub fn from_headers(headers: &HeaderMap) -> Self {
        match fields::combined(headers, CACHE_CONTROL) {
            Some(value) => Self::parse(&value),
            None => CacheControl {
                no_cache: pragma_no_cache(headers),
                ..Self::default()
            },
        }
    }

    /// Parses one (possibly combined) `Cache-Control` value.
    pub fn parse(value: &str) -> Self {
        let mut cc = CacheControl::default();
        for member in fields::split_list(value) {
            let (name, raw_value) = fields::split_assignment(member);
            let value = raw_value.map(fields::unquote);
            let seconds = value.as_deref().and_then(fields::parse_delta_seconds);
            match &*fields::ascii_lowercase(name) {
                "no-store" => cc.no_store = true,
                "no-cache" => cc.no_cache = true,
                "private" => cc.private = true,
                "public" => cc.public = true,
                "must-revalidate" => cc.must_revalidate = true,
                "proxy-revalidate" => cc.proxy_revalidate = true,
                "no-transform" => cc.no_transform = true,
                "immutable" => cc.immutable = true,
                "must-understand" => cc.must_understand = true,
                "only-if-cached" => cc.only_if_cached = true,
                "max-age" => keep_smallest(&mut cc.max_age, Some(seconds.unwrap_or(0))),
                "s-maxage" => keep_smallest(&mut cc.s_maxage, Some(seconds.unwrap_or(0))),
                "stale-while-revalidate" => keep_smallest(&mut cc.stale_while_revalidate, seconds),
                "stale-if-error" => keep_smallest(&mut cc.stale_if_error, seconds),
                "min-fresh" => {
                    if let Some(s) = seconds {
                        cc.min_fresh = Some(cc.min_fresh.map_or(s, |old| old.max(s)));
                    }
                }
                "max-stale" => match (raw_value, seconds) {
                    (None, _) => cc.max_stale = cc.max_stale.or(Some(None)),
                    (Some(_), Some(s)) => {
                        let bound = cc.max_stale.flatten().map_or(s, |old| old.min(s));
                        cc.max_stale = Some(Some(bound));
                    }
                    (Some(_), None) => {}
                },
                _ => {}
            }
        }
        cc
    }
}

fn keep_smallest(slot: &mut Option<u64>, candidate: Option<u64>) {
    if let Some(new) = candidate {
        *slot = Some(slot.map_or(new, |old| old.min(new)));
    }
}

fn pragma_no_cache(headers: &HeaderMap) -> bool {
    fields::combined(headers, PRAGMA).is_some_and(|value| {
        fields::split_list(&value).any(|member| member.eq_ignore_ascii_case("no-cache"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::MAX_DELTA_SECONDS;
    use http::HeaderValue;

    #[test]
    fn typical_response() {
        let cc =
            CacheControl::parse("public, max-age=3600, s-maxage=600, stale-while-revalidate=30");
        assert!(cc.public && !cc.private && !cc.no_store);
        assert_eq!(cc.max_age, Some(3600));
        assert_eq!(cc.s_maxage, Some(600));
        assert_eq!(cc.stale_while_revalidate, Some(30));
    }

    #[test]
    fn every_flag() {
        let cc = CacheControl::parse(
            "no-store,no-cache,private,public,must-revalidate,proxy-revalidate,no-transform,\
             immutable,must-understand,only-if-cached",
        );
        assert!(cc.no_store && cc.no_cache && cc.private && cc.public);
        assert!(cc.must_revalidate && cc.proxy_revalidate && cc.no_transform);
        assert!(cc.immutable && cc.must_understand && cc.only_if_cached);
    }

    #[test]
    fn names_are_case_insensitive_and_values_may_be_quoted() {
        let cc = CacheControl::parse("Max-Age=\"60\", NO-STORE, Stale-If-Error = 5");
        assert_eq!(cc.max_age, Some(60));
        assert!(cc.no_store);
        assert_eq!(cc.stale_if_error, Some(5));
    }

    #[test]
    fn qualified_no_cache_and_private() {
        let cc = CacheControl::parse("no-cache=\"Set-Cookie, X-Foo\", private=\"a,b\", max-age=5");
        assert!(cc.no_cache && cc.private);
        assert_eq!(cc.max_age, Some(5));
    }

    #[test]
    fn max_stale_forms() {
        assert_eq!(CacheControl::parse("max-stale").max_stale, Some(None));
        assert_eq!(
            CacheControl::parse("max-stale=10").max_stale,
            Some(Some(10))
        );
        assert_eq!(CacheControl::parse("max-stale=x").max_stale, None);
        assert_eq!(
            CacheControl::parse("max-stale, max-stale=10").max_stale,
            Some(Some(10))
        );
        assert_eq!(
            CacheControl::parse("max-stale=10, max-stale").max_stale,
            Some(Some(10))
        );
        assert_eq!(
            CacheControl::parse("max-stale=10, max-stale=3").max_stale,
            Some(Some(3))
        );
    }

    #[test]
    fn duplicates_keep_the_most_restrictive_value() {
        let cc = CacheControl::parse(
            "max-age=60, max-age=5, min-fresh=1, min-fresh=9, stale-if-error=8, stale-if-error=80",
        );
        assert_eq!(cc.max_age, Some(5));
        assert_eq!(cc.min_fresh, Some(9));
        assert_eq!(cc.stale_if_error, Some(8));
    }

    #[test]
    fn garbage_values() {
        let cc = CacheControl::parse(
            "max-age=abc, s-maxage=-1, min-fresh=1.5, stale-while-revalidate=, stale-if-error",
        );
        assert_eq!(cc.max_age, Some(0), "invalid max-age means stale");
        assert_eq!(cc.s_maxage, Some(0));
        assert_eq!(cc.min_fresh, None);
        assert_eq!(cc.stale_while_revalidate, None);
        assert_eq!(cc.stale_if_error, None);
        assert_eq!(CacheControl::parse("max-age").max_age, Some(0));
    }

    #[test]
    fn huge_numbers_saturate() {
        let cc =
            CacheControl::parse("max-age=99999999999999999999, min-fresh=18446744073709551616");
        assert_eq!(cc.max_age, Some(MAX_DELTA_SECONDS));
        assert_eq!(cc.min_fresh, Some(MAX_DELTA_SECONDS));
    }

    #[test]
    fn empty_and_junk_lists() {
        assert_eq!(CacheControl::parse(""), CacheControl::default());
        assert_eq!(CacheControl::parse(" , ,,"), CacheControl::default());
        assert_eq!(
            CacheControl::parse("=,==,\"no-store\",no store, x=\"unterminated"),
            CacheControl::default()
        );
        let cc = CacheControl::parse("foo=\"a, no-store\", max-age=1");
        assert!(!cc.no_store, "a quoted comma does not start a directive");
        assert_eq!(cc.max_age, Some(1));
    }

    #[test]
    fn multiple_lines_and_non_utf8() {
        let mut headers = HeaderMap::new();
        headers.append(CACHE_CONTROL, HeaderValue::from_static("max-age=60"));
        headers.append(
            CACHE_CONTROL,
            HeaderValue::from_bytes(b"x=\xff\xfe, private").unwrap(),
        );
        let cc = CacheControl::from_headers(&headers);
        assert_eq!(cc.max_age, Some(60));
        assert!(cc.private);
    }

    #[test]
    fn pragma_only_without_cache_control() {
        let mut headers = HeaderMap::new();
        headers.insert(PRAGMA, HeaderValue::from_static("foo, No-Cache"));
        assert!(CacheControl::from_headers(&headers).no_cache);
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=5"));
        assert!(!CacheControl::from_headers(&headers).no_cache);
        assert!(!CacheControl::from_headers(&HeaderMap::new()).no_cache);
    }
}
