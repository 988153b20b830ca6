//! RFC 9842 (Compression Dictionary Transport) fields: `Available-Dictionary`,
//! `Dictionary-ID`, `Use-As-Dictionary`, and the `Sec-Fetch-*` / CORS rule that says
//! whether a dictionary may be used for a request.

use base64::Engine;
use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::fields;

pub const AVAILABLE_DICTIONARY: HeaderName = HeaderName::from_static("available-dictionary");
pub const DICTIONARY_ID: HeaderName = HeaderName::from_static("dictionary-id");
pub const USE_AS_DICTIONARY: HeaderName = HeaderName::from_static("use-as-dictionary");

/// The SHA-256 a client says it holds: `Available-Dictionary: :<base64>:` (a
/// structured-field byte sequence). `None` when absent, repeated or malformed.
pub fn available_dictionary(headers: &HeaderMap) -> Option<[u8; 32]> {
    let mut values = headers.get_all(AVAILABLE_DICTIONARY).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None; // exactly one is allowed (RFC 9842 §2.2)
    }
    let text = value.to_str().ok()?.trim();
    let inner = text.strip_prefix(':')?.strip_suffix(':')?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .ok()?;
    bytes.try_into().ok()
}

/// The value for `Available-Dictionary` naming `hash` (for clients).
#[allow(
    clippy::expect_used,
    reason = "base64 between colons is visible ASCII, which a field value may hold"
)]
pub fn available_dictionary_value(hash: &[u8; 32]) -> HeaderValue {
    let text = format!(
        ":{}:",
        base64::engine::general_purpose::STANDARD.encode(hash)
    );
    HeaderValue::from_str(&text).expect("base64 is a valid header value")
}

/// `Use-As-Dictionary` for a `match` pattern, optional destinations and id
/// (a structured-field dictionary). `None` when a value cannot be expressed as an
/// sf-string (control characters, non-ASCII).
pub fn use_as_dictionary(
    pattern: &str,
    destinations: &[&str],
    id: Option<&str>,
) -> Option<HeaderValue> {
    let mut value = format!("match={}", sf_string(pattern)?);
    if !destinations.is_empty() {
        let list: Option<Vec<String>> = destinations.iter().map(|d| sf_string(d)).collect();
        value.push_str(&format!(", match-dest=({})", list?.join(" ")));
    }
    if let Some(id) = id {
        value.push_str(&format!(", id={}", sf_string(id)?));
    }
    HeaderValue::from_str(&value).ok()
}

/// The `match` pattern of a response's `Use-As-Dictionary` (for clients); `None`
/// when absent, without a string `match`, or of a `type` other than `raw`, which
/// a client must ignore (RFC 9842 §2.1.4).
pub fn use_as_dictionary_match(headers: &HeaderMap) -> Option<String> {
    let value = fields::combined(headers, USE_AS_DICTIONARY)?;
    let mut pattern = None;
    for member in fields::split_list(&value) {
        match fields::split_assignment(member) {
            ("match", Some(v)) if v.starts_with('"') => {
                pattern = Some(fields::unquote(v).into_owned())
            }
            ("type", Some(t)) if t != "raw" => return None,
            _ => {}
        }
    }
    pattern
}

fn sf_string(s: &str) -> Option<String> {
    if !s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    Some(format!(
        "\"{}\"",
        s.replace('\\', "\\\\").replace('"', "\\\"")
    ))
}

/// Whether a dictionary may be used for this request and response (RFC 9842 §7,
/// readability): a same-origin fetch, a navigation, or a request without fetch
/// metadata may use it; a `cors` fetch only when the response lets the request's
/// origin read it; any other cross-origin fetch (`no-cors`) may not.
pub fn dictionary_allowed(request: &HeaderMap, response: &HeaderMap) -> bool {
    let field = |h: &HeaderMap, name: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase())
    };
    let site = field(request, "sec-fetch-site");
    let mode = field(request, "sec-fetch-mode");
    if site.as_deref() == Some("same-origin") {
        return true;
    }
    match mode.as_deref() {
        None => site.is_none(),
        Some("navigate") | Some("same-origin") => true,
        Some("cors") => {
            let allowed = field(response, "access-control-allow-origin");
            let origin = field(request, "origin");
            match allowed.as_deref() {
                Some("*") => true,
                Some(a) => origin.as_deref() == Some(a),
                None => false,
            }
        }
        Some(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::test_map as map;

    #[test]
    fn available_dictionary_round_trips_and_rejects_junk() {
        let hash = [7u8; 32];
        let mut h = HeaderMap::new();
        h.insert(AVAILABLE_DICTIONARY, available_dictionary_value(&hash));
        assert_eq!(available_dictionary(&h), Some(hash));
        for bad in [&b":abc:"[..], b"not base64", b"::", b":AAAA:", b"\xff"] {
            assert_eq!(
                available_dictionary(&map(&[("available-dictionary", bad)])),
                None
            );
        }
        let two = map(&[
            (
                "available-dictionary",
                h.get(AVAILABLE_DICTIONARY).unwrap().as_bytes(),
            ),
            ("available-dictionary", b":x:"),
        ]);
        assert_eq!(available_dictionary(&two), None);
    }

    #[test]
    fn use_as_dictionary_is_a_structured_dictionary() {
        let v = use_as_dictionary("/app.*.js", &[], None).unwrap();
        assert_eq!(v, "match=\"/app.*.js\"");
        let v = use_as_dictionary("/p", &["document"], Some("d\"1")).unwrap();
        assert_eq!(v, "match=\"/p\", match-dest=(\"document\"), id=\"d\\\"1\"");
        assert!(use_as_dictionary("/é", &[], None).is_none());
    }

    #[test]
    fn clients_read_the_match_pattern() {
        let read = |v: &[u8]| use_as_dictionary_match(&map(&[("use-as-dictionary", v)]));
        assert_eq!(
            read(b"match=\"/p\", match-dest=(\"document\")").as_deref(),
            Some("/p")
        );
        assert_eq!(
            read(b"id=\"x, y\", match=\"/a\\\"b*\"").as_deref(),
            Some("/a\"b*")
        );
        assert_eq!(read(b"match=\"/p\", type=other"), None);
        assert_eq!(read(b"match=token"), None);
        assert_eq!(read(b"id=\"x\""), None);
    }

    #[test]
    fn sec_fetch_rules() {
        let none = HeaderMap::new();
        assert!(dictionary_allowed(&none, &none));
        assert!(dictionary_allowed(
            &map(&[
                ("sec-fetch-site", b"same-origin"),
                ("sec-fetch-mode", b"no-cors")
            ]),
            &none
        ));
        assert!(!dictionary_allowed(
            &map(&[
                ("sec-fetch-site", b"cross-site"),
                ("sec-fetch-mode", b"no-cors")
            ]),
            &none
        ));
        assert!(dictionary_allowed(
            &map(&[
                ("sec-fetch-site", b"same-origin"),
                ("sec-fetch-mode", b"navigate")
            ]),
            &none
        ));
        assert!(dictionary_allowed(
            &map(&[
                ("sec-fetch-site", b"cross-site"),
                ("sec-fetch-mode", b"navigate")
            ]),
            &none
        ));
        let cors = map(&[
            ("sec-fetch-site", b"cross-site"),
            ("sec-fetch-mode", b"cors"),
            ("origin", b"https://a"),
        ]);
        assert!(!dictionary_allowed(&cors, &none));
        assert!(dictionary_allowed(
            &cors,
            &map(&[("access-control-allow-origin", b"https://a")])
        ));
        assert!(dictionary_allowed(
            &cors,
            &map(&[("access-control-allow-origin", b"*")])
        ));
        assert!(!dictionary_allowed(
            &cors,
            &map(&[("access-control-allow-origin", b"https://b")])
        ));
    }
}
