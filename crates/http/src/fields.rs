//! Shared low-level field-value helpers: list splitting, quoted strings,
//! delta-seconds and HTTP dates (RFC 9110 §5.6, RFC 9111 §1.2.2).
//!
//! Every function here accepts arbitrary header bytes and never panics:
//! the typed parsers in the other modules are built on them.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderMap, HeaderName};

/// The largest delta-seconds value wirefold represents. RFC 9111 §1.2.2 says a
/// value too large to represent MUST be taken as 2^31; using that cap
/// everywhere also keeps `SystemTime` arithmetic far from overflow.
pub(crate) const MAX_DELTA_SECONDS: u64 = 1 << 31;

/// All lines of field `name` joined with ", " (RFC 9110 §5.3), or `None` when
/// the field is absent. Non-UTF-8 bytes (obs-text) become U+FFFD so that one
/// odd member cannot hide the well-formed members next to it. A single line of
/// UTF-8 (nearly every request's) is borrowed, not copied.
pub(crate) fn combined(
    headers: &HeaderMap,
    name: impl http::header::AsHeaderName,
) -> Option<Cow<'_, str>> {
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    let Some(second) = lines.next() else {
        return Some(String::from_utf8_lossy(first.as_bytes()));
    };
    let mut joined = String::from_utf8_lossy(first.as_bytes()).into_owned();
    for line in std::iter::once(second).chain(lines) {
        joined.push_str(", ");
        joined.push_str(&String::from_utf8_lossy(line.as_bytes()));
    }
    Some(Cow::Owned(joined))
}

/// Splits a comma-separated list (RFC 9110 §5.6.1) into trimmed, non-empty
/// members. Commas inside quoted strings do not split, so `no-cache="a, b"`
/// stays one member.
pub(crate) fn split_list(value: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(value);
    std::iter::from_fn(move || {
        let list = rest?;
        let end = member_end(list);
        rest = list.get(end + 1..);
        Some(list[..end].trim())
    })
    .filter(|member| !member.is_empty())
}

/// Where the member at the start of `list` ends: its first comma outside quotes,
/// or the end.
fn member_end(list: &str) -> usize {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in list.char_indices() {
        if in_quotes {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_quotes = false;
            }
        } else if c == '"' {
            in_quotes = true;
        } else if c == ',' {
            return i;
        }
    }
    list.len()
}

/// `text` in ASCII lowercase, borrowed when it already is (as nearly every token
/// and media type a peer sends).
pub(crate) fn ascii_lowercase(text: &str) -> Cow<'_, str> {
    if text.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(text.to_ascii_lowercase())
    } else {
        Cow::Borrowed(text)
    }
}

/// Splits `name=value` (either side trimmed); a bare `name` has no value.
pub(crate) fn split_assignment(member: &str) -> (&str, Option<&str>) {
    match member.split_once('=') {
        Some((name, value)) => (name.trim(), Some(value.trim())),
        None => (member.trim(), None),
    }
}

/// Removes the quotes and backslash escapes of a quoted-string; other text is
/// returned as is. An unterminated quote keeps everything after the opening
/// quote, which is the most useful reading of a truncated value.
pub(crate) fn unquote(value: &str) -> Cow<'_, str> {
    let Some(inner) = value.strip_prefix('"') else {
        return Cow::Borrowed(value);
    };
    let inner = inner.strip_suffix('"').unwrap_or(inner);
    if !inner.contains('\\') {
        return Cow::Borrowed(inner);
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(escaped) = chars.next() {
                out.push(escaped);
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Parses delta-seconds (`1*DIGIT`), saturating at [`MAX_DELTA_SECONDS`].
/// Signs, fractions, spaces and empty strings are invalid.
pub(crate) fn parse_delta_seconds(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut seconds: u64 = 0;
    for digit in value.bytes() {
        seconds = seconds
            .saturating_mul(10)
            .saturating_add(u64::from(digit - b'0'));
        if seconds >= MAX_DELTA_SECONDS {
            return Some(MAX_DELTA_SECONDS);
        }
    }
    Some(seconds)
}

/// The HTTP-date in field `name`, if it is present exactly once and valid.
/// Several lines make the value invalid (RFC 9110 §13.1.3 says to ignore
/// such date conditions), and so do non-ASCII bytes.
pub(crate) fn http_date(headers: &HeaderMap, name: &HeaderName) -> Option<SystemTime> {
    let mut lines = headers.get_all(name).iter();
    let line = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    httpdate::parse_http_date(line.to_str().ok()?.trim()).ok()
}

/// Whole seconds since the Unix epoch; times before it count as 0. HTTP dates
/// have one-second resolution, so validators are compared at this precision.
pub(crate) fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Formats `time` as an IMF-fixdate, or `None` outside the years 1970–9999
/// that HTTP dates (and `httpdate`, which panics there) can express.
pub fn format_http_date(time: SystemTime) -> Option<String> {
    const END_OF_9999: Duration = Duration::from_secs(253_402_300_799);
    let since_epoch = time.duration_since(UNIX_EPOCH).ok()?;
    (since_epoch <= END_OF_9999).then(|| httpdate::fmt_http_date(time))
}

/// `n` in decimal as a field value (`Content-Length`): one allocation, where `http`'s
/// `From<u64>` makes two.
#[allow(clippy::expect_used, reason = "ASCII digits are a valid field value")]
pub fn decimal_value(n: u64) -> http::HeaderValue {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = n;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    http::HeaderValue::from_bytes(&digits[start..]).expect("ASCII digits")
}

/// A header map from (name, raw value) pairs, for tests.
#[cfg(test)]
pub(crate) fn test_map(pairs: &[(&str, &[u8])]) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    for (name, value) in pairs {
        headers.append(
            http::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_bytes(value).unwrap(),
        );
    }
    headers
}

/// The essence of a media type (RFC 9110 §8.3.1): type and subtype, lowercase,
/// parameters dropped (`Text/HTML; charset=utf-8` is `text/html`). Borrowed when
/// already lowercase, as nearly every one is.
pub fn media_type_essence(content_type: &str) -> Cow<'_, str> {
    ascii_lowercase(content_type.split(';').next().unwrap_or("").trim())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn split_list_respects_quotes_and_drops_empty_members() {
        let split = |value| split_list(value).collect::<Vec<_>>();
        assert_eq!(split(" a ,, b=\"x, y\" ,c,"), ["a", "b=\"x, y\"", "c"]);
        assert_eq!(split(r#"a="q\", still", b"#), [r#"a="q\", still""#, "b"]);
        assert_eq!(split("a,\"open, b"), ["a", "\"open, b"]);
        assert!(split(" , ,").is_empty());
        assert!(split("").is_empty());
    }

    #[test]
    fn unquote_handles_escapes_and_truncation() {
        assert_eq!(unquote("plain"), "plain");
        assert_eq!(unquote("\"a b\""), "a b");
        assert_eq!(unquote(r#""a\"b\\""#), r#"a"b\"#);
        assert_eq!(unquote("\"open"), "open");
        assert_eq!(unquote("\"trailing\\"), "trailing");
        assert_eq!(unquote("\""), "");
    }

    #[test]
    fn delta_seconds_saturate_and_reject_junk() {
        assert_eq!(parse_delta_seconds("0"), Some(0));
        assert_eq!(parse_delta_seconds("0060"), Some(60));
        assert_eq!(
            parse_delta_seconds("99999999999999999999999999"),
            Some(MAX_DELTA_SECONDS)
        );
        assert_eq!(parse_delta_seconds("2147483648"), Some(MAX_DELTA_SECONDS));
        for junk in ["", "-1", "+1", "1.5", " 1", "abc", "١٢"] {
            assert_eq!(parse_delta_seconds(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn decimal_values_are_the_numbers_digits() {
        for n in [0, 7, 10, 99_690, u64::MAX] {
            assert_eq!(decimal_value(n), n.to_string().as_str());
        }
    }

    #[test]
    fn media_type_essence_lowercases_and_drops_parameters() {
        assert_eq!(
            media_type_essence(" Text/HTML ; charset=utf-8"),
            "text/html"
        );
        assert!(matches!(
            media_type_essence("text/css;charset=utf-8"),
            Cow::Borrowed("text/css")
        ));
        assert_eq!(media_type_essence(""), "");
    }

    #[test]
    fn combined_joins_lines_and_survives_non_utf8() {
        let mut headers = HeaderMap::new();
        assert_eq!(combined(&headers, "x-list"), None);
        headers.append("x-list", HeaderValue::from_static("a"));
        assert!(matches!(
            combined(&headers, "x-list"),
            Some(Cow::Borrowed("a"))
        ));
        headers.append("x-list", HeaderValue::from_bytes(b"b\xff").unwrap());
        assert_eq!(combined(&headers, "x-list").unwrap(), "a, b\u{fffd}");
    }

    #[test]
    fn http_date_needs_exactly_one_valid_line() {
        let name = http::header::DATE;
        let mut headers = HeaderMap::new();
        assert_eq!(http_date(&headers, &name), None);
        headers.insert(
            &name,
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert_eq!(
            unix_seconds(http_date(&headers, &name).unwrap()),
            784_111_777
        );
        headers.append(
            &name,
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert_eq!(http_date(&headers, &name), None);
        for junk in [
            &b"yesterday"[..],
            b"",
            b"Sun, 06 Nov 1994 08:49:37 GMT\xff",
            b"Sun, 31 Feb 2020 00:00:00 GMT",
        ] {
            headers.insert(&name, HeaderValue::from_bytes(junk).unwrap());
            assert_eq!(http_date(&headers, &name), None, "{junk:?}");
        }
    }

    #[test]
    fn format_http_date_refuses_unrepresentable_times() {
        assert_eq!(
            format_http_date(UNIX_EPOCH).unwrap(),
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
        assert_eq!(format_http_date(UNIX_EPOCH - Duration::from_secs(1)), None);
        assert_eq!(
            format_http_date(UNIX_EPOCH + Duration::from_secs(300_000_000_000)),
            None
        );
    }
}
