//! `Vary` (RFC 9110 §12.5.5, RFC 9111 §4.1): which request headers select
//! among a URI's stored responses, turned into a secondary cache key.
//!
//! Two requests may share a stored response exactly when their secondary keys
//! are equal, so the key must be deterministic and must never merge values
//! that could mean different things: non-ASCII bytes are escaped, not lost,
//! and an absent header differs from an empty one.

use std::fmt::Write as _;

use http::header::{HeaderMap, HeaderName, HeaderValue, VARY};

use crate::fields;

/// A parsed `Vary` response header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vary {
    /// No `Vary` (or one naming no valid field): one response fits all requests.
    Absent,
    /// `Vary: *`: the response can never be reused for another request.
    Any,
    /// The named request fields, lowercase, sorted and deduplicated, so the
    /// order the origin happened to list them in does not matter.
    Fields(Vec<HeaderName>),
}

impl Vary {
    /// Reads every `Vary` line. `*` anywhere wins; members that are not
    /// valid field names are skipped, since no request can carry them.
    pub fn from_headers(resp: &HeaderMap) -> Self {
        let Some(value) = fields::combined(resp, VARY) else {
            return Vary::Absent;
        };
        if fields::split_list(&value).any(|m| m == "*") {
            return Vary::Any;
        }
        let mut names: Vec<HeaderName> = fields::split_list(&value)
            .filter_map(|m| HeaderName::from_bytes(m.as_bytes()).ok())
            .collect();
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        names.dedup();
        if names.is_empty() {
            Vary::Absent
        } else {
            Vary::Fields(names)
        }
    }

    /// The secondary key of `req` for a response with this `Vary`, or `None`
    /// for `Vary: *` (never matches). Fields in `ignore` are left out: the
    /// proxy passes `accept-encoding` because it stores decoded bodies and
    /// negotiates the coding itself.
    ///
    /// Format: one `name=value\n` per field (`name\n` when the request lacks
    /// it), value lines joined with ", ", whitespace runs collapsed to one
    /// space and trimmed, and bytes outside visible ASCII plus `%` written as
    /// `%XX`. `Absent` gives the empty string.
    pub fn secondary_key(&self, req: &HeaderMap, ignore: &[HeaderName]) -> Option<String> {
        let names = match self {
            Vary::Any => return None,
            Vary::Absent => return Some(String::new()),
            Vary::Fields(names) => names,
        };
        let mut key = String::new();
        for name in names.iter().filter(|name| !ignore.contains(name)) {
            key.push_str(name.as_str());
            let mut lines = req.get_all(name).iter().peekable();
            if lines.peek().is_some() {
                key.push('=');
                let joined: Vec<&[u8]> = lines.map(HeaderValue::as_bytes).collect();
                push_normalized(&mut key, &joined.join(&b", "[..]));
            }
            key.push('\n');
        }
        Some(key)
    }
}

/// Adds `field` to the response's `Vary` (e.g. `accept-encoding` when the
/// proxy compresses) unless it is already listed (case-insensitively) or
/// `Vary: *` makes it moot. The existing lines are kept verbatim and combined
/// into one. A `field` that is not a valid field name is ignored.
pub fn add_field(headers: &mut HeaderMap, field: &str) {
    let Ok(name) = HeaderName::from_bytes(field.trim().as_bytes()) else {
        return;
    };
    if !headers.contains_key(VARY) {
        // The usual case: a standard name's value is its static text, not a copy.
        headers.insert(VARY, HeaderValue::from(name));
        return;
    }
    match Vary::from_headers(headers) {
        Vary::Any => return,
        Vary::Fields(names) if names.contains(&name) => return,
        _ => {}
    }
    let mut combined: Vec<u8> = Vec::new();
    for line in headers.get_all(VARY) {
        let line = line.as_bytes().trim_ascii();
        if !line.is_empty() {
            combined.extend_from_slice(line);
            combined.extend_from_slice(b", ");
        }
    }
    combined.extend_from_slice(name.as_str().as_bytes());
    if let Ok(value) = HeaderValue::from_bytes(&combined) {
        headers.insert(VARY, value);
    }
}

/// Appends `value` with whitespace runs collapsed, ends trimmed, and bytes
/// that are not visible ASCII (or are `%`) percent-encoded.
fn push_normalized(key: &mut String, value: &[u8]) {
    let mut pending_space = false;
    for &byte in value.trim_ascii() {
        if byte == b' ' || byte == b'\t' {
            pending_space = true;
            continue;
        }
        if pending_space {
            key.push(' ');
            pending_space = false;
        }
        if byte.is_ascii_graphic() && byte != b'%' {
            key.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(key, "%{byte:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{ACCEPT_ENCODING, ACCEPT_LANGUAGE, COOKIE};

    use crate::fields::test_map as map;

    #[test]
    fn parse_joins_lowercases_sorts_and_dedups() {
        let resp = map(&[
            ("vary", b"Accept-Language, accept-encoding"),
            ("vary", b"ACCEPT-LANGUAGE,,cookie"),
        ]);
        assert_eq!(
            Vary::from_headers(&resp),
            Vary::Fields(vec![ACCEPT_ENCODING, ACCEPT_LANGUAGE, COOKIE])
        );
    }

    #[test]
    fn parse_star_absent_and_junk() {
        assert_eq!(Vary::from_headers(&HeaderMap::new()), Vary::Absent);
        assert_eq!(
            Vary::from_headers(&map(&[("vary", b"accept"), ("vary", b" * ")])),
            Vary::Any
        );
        assert_eq!(Vary::from_headers(&map(&[("vary", b"")])), Vary::Absent);
        assert_eq!(
            Vary::from_headers(&map(&[("vary", b" , bad name, \xff\xfe, \"q\"")])),
            Vary::Absent
        );
        assert_eq!(
            Vary::from_headers(&map(&[("vary", b"*x")])),
            Vary::Fields(vec![HeaderName::from_static("*x")])
        );
    }

    #[test]
    fn secondary_key_normalizes_values() {
        let vary = Vary::from_headers(&map(&[("vary", b"Accept-Language, X-Mode")]));
        let one_line = map(&[("accept-language", b"en,  de\t;q=0.5 ")]);
        let two_lines = map(&[
            ("accept-language", b" en"),
            ("accept-language", b"de ;q=0.5"),
        ]);
        let key = vary.secondary_key(&one_line, &[]).unwrap();
        assert_eq!(key, "accept-language=en, de ;q=0.5\nx-mode\n");
        // "en,  de" collapses to "en, de"; joining lines inserts ", ".
        assert_eq!(vary.secondary_key(&two_lines, &[]).unwrap(), key);
    }

    #[test]
    fn secondary_key_keeps_distinctions() {
        let vary = Vary::Fields(vec![COOKIE]);
        let key = |req: &HeaderMap| vary.secondary_key(req, &[]).unwrap();
        let absent = key(&HeaderMap::new());
        let empty = key(&map(&[("cookie", b"")]));
        let latin = key(&map(&[("cookie", b"a=\xe9")]));
        let other = key(&map(&[("cookie", b"a=\xe8")]));
        let literal = key(&map(&[("cookie", b"a=%E9")]));
        let all = [absent, empty, latin.clone(), other, literal];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(latin, "cookie=a=%E9\n");
    }

    #[test]
    fn secondary_key_special_cases() {
        let req = map(&[("accept-encoding", b"gzip"), ("cookie", b"x")]);
        assert_eq!(Vary::Any.secondary_key(&req, &[]), None);
        assert_eq!(Vary::Absent.secondary_key(&req, &[]).unwrap(), "");
        let vary = Vary::Fields(vec![ACCEPT_ENCODING, COOKIE]);
        assert_eq!(
            vary.secondary_key(&req, &[ACCEPT_ENCODING]).unwrap(),
            "cookie=x\n"
        );
    }

    #[test]
    fn add_field_appends_once() {
        let mut headers = HeaderMap::new();
        add_field(&mut headers, "Accept-Encoding");
        assert_eq!(headers[VARY], "accept-encoding");
        add_field(&mut headers, "ACCEPT-ENCODING");
        assert_eq!(headers[VARY], "accept-encoding");

        let mut headers = map(&[("vary", b"Cookie"), ("vary", b" "), ("vary", b"Accept\xff")]);
        add_field(&mut headers, "available-dictionary");
        assert_eq!(headers.get_all(VARY).iter().count(), 1);
        assert_eq!(
            headers[VARY].as_bytes(),
            b"Cookie, Accept\xff, available-dictionary"
        );
    }

    #[test]
    fn add_field_leaves_star_and_rejects_invalid_names() {
        let mut headers = map(&[("vary", b"*")]);
        add_field(&mut headers, "accept-encoding");
        assert_eq!(headers[VARY], "*");
        let mut headers = HeaderMap::new();
        add_field(&mut headers, "bad name\r\n");
        add_field(&mut headers, "");
        assert!(headers.is_empty());
    }
}
