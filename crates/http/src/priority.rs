//! Response priority (RFC 9218): the `Priority` request field, and the urgency a
//! request gets without one, from what it is for.
//!
//! Chromium (156) sends the field over HTTP/2 on every request (besides the
//! HEADERS frame's own RFC 7540 priority, which the `h2` crate does not expose):
//! `u=0, i` for a navigation (document or iframe), `u=0` for a stylesheet, `u=1` for
//! a script or font, `i` (urgency 3) for an image. The defaults below follow it for
//! clients that send none, with the document alone ahead.

use http::HeaderMap;

/// The lowest urgency (RFC 9218 §4.1: 0 is the most urgent, 7 the least).
pub const LEAST_URGENT: u8 = 7;
/// The urgency of a request whose field names none (RFC 9218 §4.1).
pub const DEFAULT_URGENCY: u8 = 3;

/// A request's priority: its urgency (0 most urgent … 7) and whether its response
/// is useful in pieces (`i`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    urgency: u8,
    pub incremental: bool,
}

impl Priority {
    /// A priority of `urgency`, clamped to 0–7.
    pub fn new(urgency: u8, incremental: bool) -> Self {
        Priority {
            urgency: urgency.min(LEAST_URGENT),
            incremental,
        }
    }

    /// 0 (most urgent) to 7.
    pub fn urgency(self) -> u8 {
        self.urgency
    }

    /// The request's priority: its `Priority` field when that is a valid structured
    /// dictionary (RFC 8941; `u` and `i` of the wrong type or out of range are
    /// ignored, as are unknown keys), else the default for its destination
    /// ([`Priority::by_destination`]).
    pub fn of_request(headers: &HeaderMap) -> Self {
        let mut fields = headers.get_all("priority").iter();
        // Several field lines would have to be joined as one dictionary; a client
        // that sends them is unusual enough to get the default.
        match (fields.next(), fields.next()) {
            (Some(value), None) => value
                .to_str()
                .ok()
                .and_then(Priority::parse)
                .unwrap_or_else(|| Priority::by_destination(headers)),
            _ => Priority::by_destination(headers),
        }
    }

    /// Parses a `Priority` field value; `None` when it is not a structured dictionary.
    pub fn parse(value: &str) -> Option<Self> {
        let mut priority = Priority::new(DEFAULT_URGENCY, false);
        for (key, item) in dictionary(value)? {
            match (key, item) {
                ("u", Item::Integer(u)) if (0..=i64::from(LEAST_URGENT)).contains(&u) => {
                    priority.urgency = u as u8;
                }
                ("i", Item::Boolean(i)) => priority.incremental = i,
                _ => {}
            }
        }
        Some(priority)
    }

    /// The default for a request without a (valid) field, by `Sec-Fetch-Dest`, or
    /// by `Accept` for clients that do not send it: a page (document, iframe, or a
    /// request accepting HTML) 0; what blocks rendering (style, script, font) 1;
    /// anything else 3 (RFC 9218's default: images, media, fetches).
    pub fn by_destination(headers: &HeaderMap) -> Self {
        let field = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
        };
        let urgency = match field("sec-fetch-dest") {
            "document" | "iframe" | "frame" => 0,
            "style" | "script" | "font" | "worker" | "sharedworker" => 1,
            "" if field("accept").contains("text/html") => 0,
            _ => DEFAULT_URGENCY,
        };
        Priority::new(urgency, urgency == 0)
    }
}

/// A bare item of a structured field (RFC 8941 §3.3), as far as priority needs it.
#[derive(Debug, PartialEq)]
enum Item {
    Integer(i64),
    Boolean(bool),
    /// Decimals, strings, tokens and byte sequences: valid, and of no use here.
    Other,
}

/// The members of a structured dictionary (RFC 8941 §4.2.2), their parameters
/// skipped; `None` when `value` is not one (inner lists included: priority has none).
fn dictionary(value: &str) -> Option<Vec<(&str, Item)>> {
    let mut members = Vec::new();
    let mut rest = value.trim_matches(|c| c == ' ' || c == '\t');
    if rest.is_empty() {
        return Some(members);
    }
    loop {
        let (name, after) = key(rest)?;
        rest = after;
        let item = match rest.strip_prefix('=') {
            Some(after) => {
                let (item, after) = bare_item(after)?;
                rest = after;
                item
            }
            None => Item::Boolean(true),
        };
        while let Some(after) = rest.strip_prefix(';') {
            let (_, after) = key(after.trim_start_matches(' '))?;
            rest = match after.strip_prefix('=') {
                Some(after) => bare_item(after)?.1,
                None => after,
            };
        }
        members.push((name, item));
        rest = rest.trim_start_matches([' ', '\t']);
        if rest.is_empty() {
            return Some(members);
        }
        rest = rest.strip_prefix(',')?.trim_start_matches([' ', '\t']);
        if rest.is_empty() {
            return None;
        }
    }
}

/// A key: `lcalpha / "*"` then `lcalpha / DIGIT / "_" / "-" / "." / "*"`.
fn key(s: &str) -> Option<(&str, &str)> {
    if !s.starts_with(|c: char| c.is_ascii_lowercase() || c == '*') {
        return None;
    }
    let end = s
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.*".contains(c)))
        .unwrap_or(s.len());
    Some(s.split_at(end))
}

/// One bare item at the start of `s`, and what follows it.
fn bare_item(s: &str) -> Option<(Item, &str)> {
    let first = s.chars().next()?;
    if first == '-' || first.is_ascii_digit() {
        let digits = s.strip_prefix('-').unwrap_or(s);
        let end = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        let (int, after) = digits.split_at(end);
        if int.is_empty() {
            return None;
        }
        if let Some(fraction) = after.strip_prefix('.') {
            let end = fraction
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(fraction.len());
            return (int.len() <= 12 && (1..=3).contains(&end))
                .then(|| (Item::Other, &fraction[end..]));
        }
        if int.len() > 15 {
            return None;
        }
        let value: i64 = int.parse().ok()?;
        let value = if first == '-' { -value } else { value };
        return Some((Item::Integer(value), after));
    }
    match first {
        '?' => match s.get(1..2)? {
            "0" => Some((Item::Boolean(false), &s[2..])),
            "1" => Some((Item::Boolean(true), &s[2..])),
            _ => None,
        },
        '"' => {
            let mut escaped = false;
            for (at, c) in s.char_indices().skip(1) {
                match c {
                    _ if escaped => {
                        if c != '"' && c != '\\' {
                            return None;
                        }
                        escaped = false;
                    }
                    '\\' => escaped = true,
                    '"' => return Some((Item::Other, &s[at + 1..])),
                    ' '..='~' => {}
                    _ => return None,
                }
            }
            None
        }
        ':' => {
            let body = &s[1..];
            let end = body.find(':')?;
            body[..end]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c))
                .then(|| (Item::Other, &body[end + 1..]))
        }
        c if c.is_ascii_alphabetic() || c == '*' => {
            let end = s
                .find(|c: char| !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~:/".contains(c)))
                .unwrap_or(s.len());
            Some((Item::Other, &s[end..]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(*name, http::HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn what_chromium_sends_is_read() {
        for (value, urgency, incremental) in [
            ("u=0, i", 0, true),
            ("u=0", 0, false),
            ("u=1", 1, false),
            ("i", 3, true),
            ("u=1, i", 1, true),
            ("u=5, i=?0", 5, false),
            ("u=7;x=1, foo=\"a,b\", i=?1, u=2", 2, true),
            ("", 3, false),
        ] {
            assert_eq!(
                Priority::parse(value),
                Some(Priority::new(urgency, incremental)),
                "{value:?}"
            );
        }
    }

    #[test]
    fn garbage_is_ignored() {
        // Not a dictionary: the whole field is ignored.
        for value in [
            "u=", "U=1", "u=1,", ",u=1", "u=1;", "u=(1 2)", "u=1 i", "u=\"x", "u=1.2345", "!",
            "u=?2", "u=0x1",
        ] {
            assert_eq!(Priority::parse(value), None, "{value:?}");
        }
        // A dictionary whose `u` or `i` is out of range or of the wrong type: those
        // members are ignored (RFC 9218 §4).
        for value in [
            "u=8",
            "u=-1",
            "u=1.5",
            "u=high",
            "u=?1",
            "i=1",
            "u=9999999999999999",
        ] {
            let parsed = Priority::parse(value);
            assert!(
                parsed.is_none() || parsed == Some(Priority::new(DEFAULT_URGENCY, false)),
                "{value:?}: {parsed:?}"
            );
        }
        let image = request(&[("sec-fetch-dest", "image"), ("priority", "u=0,,")]);
        assert_eq!(Priority::of_request(&image).urgency(), DEFAULT_URGENCY);
        let page = request(&[("sec-fetch-dest", "document"), ("priority", "garbage!")]);
        assert_eq!(Priority::of_request(&page).urgency(), 0);
    }

    #[test]
    fn the_field_wins_over_the_destination() {
        let image = request(&[("sec-fetch-dest", "image"), ("priority", "u=0")]);
        assert_eq!(Priority::of_request(&image).urgency(), 0);
        let page = request(&[("sec-fetch-dest", "document"), ("priority", "u=5")]);
        assert_eq!(Priority::of_request(&page).urgency(), 5);
    }

    #[test]
    fn destinations_order_the_page_first() {
        let urgency = |fields| Priority::of_request(&request(fields)).urgency();
        assert_eq!(urgency(&[("sec-fetch-dest", "document")]), 0);
        assert_eq!(urgency(&[("sec-fetch-dest", "iframe")]), 0);
        assert_eq!(urgency(&[("accept", "text/html,*/*;q=0.8")]), 0);
        assert_eq!(urgency(&[("sec-fetch-dest", "style")]), 1);
        assert_eq!(urgency(&[("sec-fetch-dest", "script")]), 1);
        assert_eq!(urgency(&[("sec-fetch-dest", "font")]), 1);
        assert_eq!(urgency(&[("sec-fetch-dest", "image")]), 3);
        // An image request that happens to accept HTML too is still an image.
        assert_eq!(
            urgency(&[("sec-fetch-dest", "image"), ("accept", "text/html")]),
            3
        );
        assert_eq!(urgency(&[]), 3);
    }
}
