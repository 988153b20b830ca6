//! Byte range requests (RFC 9110 §14): `Range`, `If-Range` and the
//! `Content-Range` values of the answer.
//!
//! wirefold serves single byte ranges only. RFC 9110 §14.2 lets a server
//! ignore `Range`, so everything else (multiple ranges, other units, syntax
//! errors) yields the full representation rather than an error or a
//! multipart body.

use std::time::SystemTime;

use http::header::{HeaderMap, HeaderValue, IF_RANGE, RANGE};

use crate::conditional::EntityTag;
use crate::fields;

/// What to send for a GET, given its `Range` and `If-Range` headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeRequest {
    /// `200` with the whole representation.
    Full,
    /// `206` with bytes `start..=end_inclusive`, both within the representation.
    Single { start: u64, end_inclusive: u64 },
    /// `416` with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// A request's `Range` and `If-Range` fields, parsed once, at the edge; resolved
/// against a representation by [`RangeFields::resolve`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeFields {
    /// The one byte range asked for; `None` when `Range` is absent, repeated, or
    /// anything wirefold ignores (other units, several ranges, bad syntax).
    spec: Option<ByteRangeSpec>,
    /// `If-Range`, when present.
    if_range: Option<IfRange>,
}

/// One `bytes=` range, before the representation's length is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ByteRangeSpec {
    /// `first-last` (`last` at or after `first`).
    FromTo(u64, u64),
    /// `first-`
    From(u64),
    /// `-suffix`: the final `suffix` bytes.
    Suffix(u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum IfRange {
    /// Must match by strong comparison (a weak tag never does).
    Tag(EntityTag),
    /// Must equal `Last-Modified` exactly, to the second.
    Date(SystemTime),
    /// Present but unreadable: never holds.
    Invalid,
}

impl RangeFields {
    pub fn from_headers(req: &HeaderMap) -> Self {
        let mut lines = req.get_all(RANGE).iter();
        let spec = match (lines.next(), lines.next()) {
            (Some(line), None) => line.to_str().ok().and_then(parse_single_range),
            _ => None,
        };
        let if_range = req.get(IF_RANGE).map(|value| {
            let Ok(value) = value.to_str().map(str::trim) else {
                return IfRange::Invalid;
            };
            if value.starts_with('"') || value.starts_with("W/") {
                EntityTag::parse(value).map_or(IfRange::Invalid, IfRange::Tag)
            } else {
                httpdate::parse_http_date(value).map_or(IfRange::Invalid, IfRange::Date)
            }
        });
        RangeFields { spec, if_range }
    }

    /// Decides how to answer a GET for a representation of `len` bytes with the
    /// given validators. Only call it for GET: `Range` means nothing for other
    /// methods.
    ///
    /// `If-Range` must hold for the range to apply (§13.1.5): an entity tag
    /// must match `etag` by strong comparison (a weak tag never does), a date
    /// must equal `last_modified` exactly (to the second).
    pub fn resolve(
        &self,
        len: u64,
        etag: Option<&EntityTag>,
        last_modified: Option<SystemTime>,
    ) -> RangeRequest {
        let Some(spec) = self.spec else {
            return RangeRequest::Full;
        };
        let holds = match &self.if_range {
            None => true,
            Some(IfRange::Tag(wanted)) => etag.is_some_and(|etag| wanted.strong_eq(etag)),
            Some(IfRange::Date(date)) => last_modified
                .is_some_and(|m| fields::unix_seconds(*date) == fields::unix_seconds(m)),
            Some(IfRange::Invalid) => false,
        };
        if !holds {
            return RangeRequest::Full;
        }
        match spec {
            ByteRangeSpec::Suffix(suffix) if suffix == 0 || len == 0 => RangeRequest::Unsatisfiable,
            ByteRangeSpec::Suffix(suffix) => RangeRequest::Single {
                start: len - suffix.min(len),
                end_inclusive: len - 1,
            },
            ByteRangeSpec::From(start) => satisfiable_from(start, u64::MAX, len),
            ByteRangeSpec::FromTo(start, end) => satisfiable_from(start, end, len),
        }
    }
}

/// [`RangeFields::resolve`] for a request's fields.
pub fn range_for(
    req: &HeaderMap,
    len: u64,
    etag: Option<&EntityTag>,
    last_modified: Option<SystemTime>,
) -> RangeRequest {
    RangeFields::from_headers(req).resolve(len, etag, last_modified)
}

/// Parses `bytes=first-last`, `bytes=first-` or `bytes=-suffix`. `None` means
/// "ignore the header".
fn parse_single_range(value: &str) -> Option<ByteRangeSpec> {
    let (unit, ranges) = value.trim().split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let mut specs = ranges.split(',').map(str::trim).filter(|s| !s.is_empty());
    let (Some(spec), None) = (specs.next(), specs.next()) else {
        return None;
    };
    let (first, last) = spec.split_once('-')?;
    match (parse_position(first), parse_position(last)) {
        (None, Some(suffix)) if first.is_empty() => Some(ByteRangeSpec::Suffix(suffix)),
        (Some(start), None) if last.is_empty() => Some(ByteRangeSpec::From(start)),
        (Some(start), Some(end)) if start <= end => Some(ByteRangeSpec::FromTo(start, end)),
        // `b < a` and every other shape are invalid syntax (§14.1.1).
        _ => None,
    }
}

/// `start..=end` clamped to the representation, or unsatisfiable when it
/// starts past the end (this also covers `len == 0`).
fn satisfiable_from(start: u64, end: u64, len: u64) -> RangeRequest {
    if start >= len {
        RangeRequest::Unsatisfiable
    } else {
        RangeRequest::Single {
            start,
            end_inclusive: end.min(len - 1),
        }
    }
}

/// `1*DIGIT`, saturating: a position beyond `u64` is beyond any body too.
fn parse_position(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.bytes().fold(0u64, |n, d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// The `Content-Range` value of a `206`: `bytes start-end/len`.
pub fn content_range(start: u64, end_inclusive: u64, len: u64) -> HeaderValue {
    range_value(format!("bytes {start}-{end_inclusive}/{len}"))
}

/// The `Content-Range` value of a `416`: `bytes */len`.
pub fn unsatisfied_range(len: u64) -> HeaderValue {
    range_value(format!("bytes */{len}"))
}

#[allow(
    clippy::expect_used,
    reason = "`bytes`, digits and the punctuation above are visible ASCII, which a field \
              value may hold"
)]
fn range_value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).expect("a Content-Range of visible ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};
    use RangeRequest::*;

    use crate::fields::test_map as map;

    fn range(value: &str, len: u64) -> RangeRequest {
        range_for(&map(&[("range", value.as_bytes())]), len, None, None)
    }

    #[test]
    fn single_range_forms() {
        assert_eq!(
            range("bytes=0-99", 1000),
            Single {
                start: 0,
                end_inclusive: 99
            }
        );
        assert_eq!(
            range("bytes=900-", 1000),
            Single {
                start: 900,
                end_inclusive: 999
            }
        );
        assert_eq!(
            range("bytes=-100", 1000),
            Single {
                start: 900,
                end_inclusive: 999
            }
        );
        assert_eq!(
            range("bytes=-5000", 1000),
            Single {
                start: 0,
                end_inclusive: 999
            }
        );
        assert_eq!(
            range("bytes=990-5000", 1000),
            Single {
                start: 990,
                end_inclusive: 999
            }
        );
        assert_eq!(
            range("  Bytes = 5-5 ,", 10),
            Single {
                start: 5,
                end_inclusive: 5
            }
        );
    }

    #[test]
    fn unsatisfiable_ranges() {
        assert_eq!(range("bytes=1000-", 1000), Unsatisfiable);
        assert_eq!(range("bytes=1000-1001", 1000), Unsatisfiable);
        assert_eq!(range("bytes=-0", 1000), Unsatisfiable);
        assert_eq!(range("bytes=0-", 0), Unsatisfiable);
        assert_eq!(range("bytes=-5", 0), Unsatisfiable);
        assert_eq!(range("bytes=99999999999999999999999-", 1000), Unsatisfiable);
    }

    #[test]
    fn ignored_ranges_mean_full() {
        for value in [
            "bytes=0-1,5-6",
            "bytes=5-1",
            "items=0-1",
            "bytes=",
            "bytes=-",
            "bytes=a-b",
            "bytes=1-2-3",
            "bytes=+1-2",
            "bytes=0x1-2",
            "0-1",
            "",
            "bytes=- 1",
            "bytes=١-٢",
        ] {
            assert_eq!(range(value, 1000), Full, "{value:?}");
        }
        assert_eq!(range_for(&HeaderMap::new(), 1000, None, None), Full);
        let twice = map(&[("range", b"bytes=0-1"), ("range", b"bytes=0-1")]);
        assert_eq!(range_for(&twice, 1000, None, None), Full);
        assert_eq!(
            range_for(&map(&[("range", b"bytes=0-1\xff")]), 1000, None, None),
            Full
        );
    }

    #[test]
    fn huge_end_is_clamped() {
        assert_eq!(
            range("bytes=0-99999999999999999999999", 10),
            Single {
                start: 0,
                end_inclusive: 9
            }
        );
        assert_eq!(
            range("bytes=-99999999999999999999999", 10),
            Single {
                start: 0,
                end_inclusive: 9
            }
        );
    }

    #[test]
    fn if_range_with_entity_tags() {
        let etag = EntityTag::strong("v1");
        let with = |if_range: &[u8], etag: Option<&EntityTag>| {
            range_for(
                &map(&[("range", b"bytes=0-0"), ("if-range", if_range)]),
                10,
                etag,
                None,
            )
        };
        let first_byte = Single {
            start: 0,
            end_inclusive: 0,
        };
        assert_eq!(with(b"\"v1\"", Some(&etag)), first_byte);
        assert_eq!(with(b"\"v2\"", Some(&etag)), Full);
        assert_eq!(with(b"W/\"v1\"", Some(&etag)), Full);
        assert_eq!(with(b"\"v1\"", Some(&EntityTag::weak("v1"))), Full);
        assert_eq!(with(b"\"v1\"", None), Full);
        assert_eq!(with(b"\"v1", Some(&etag)), Full);
        assert_eq!(with(b"\xff", Some(&etag)), Full);
    }

    #[test]
    fn if_range_with_dates() {
        let modified = UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
        let exact = fields::format_http_date(modified).unwrap();
        let later = fields::format_http_date(modified + Duration::from_secs(1)).unwrap();
        let with = |if_range: &[u8], modified: Option<SystemTime>| {
            range_for(
                &map(&[("range", b"bytes=-1"), ("if-range", if_range)]),
                10,
                None,
                modified,
            )
        };
        assert_eq!(
            with(exact.as_bytes(), Some(modified)),
            Single {
                start: 9,
                end_inclusive: 9
            }
        );
        assert_eq!(with(later.as_bytes(), Some(modified)), Full);
        assert_eq!(with(exact.as_bytes(), None), Full);
        assert_eq!(with(b"not a date", Some(modified)), Full);
    }

    #[test]
    fn content_range_values() {
        assert_eq!(content_range(0, 99, 1000), "bytes 0-99/1000");
        assert_eq!(unsatisfied_range(1000), "bytes */1000");
    }
}
