//! Client Hints (RFC 8942) about the network and the device, read from a
//! request so that a later stage can pick smaller variants for slow links,
//! small screens or users who asked to save data:
//! - `Save-Data` and `Sec-CH-Prefers-Reduced-Data`: the user's preference;
//! - `ECT`, `RTT`, `Downlink` (Network Information): the link;
//! - `Sec-CH-DPR`, `Sec-CH-Viewport-Width`, `Sec-CH-Width`,
//!   `Sec-CH-Device-Memory`, and their legacy names `DPR`, `Viewport-Width`,
//!   `Width`, `Device-Memory`: the device.
//!
//! Every hint is an RFC 8941 structured-field Item: one bare item, then
//! parameters, which are checked against the grammar and ignored (none are
//! defined for these hints). Numbers follow RFC 8941 exactly: an Integer has
//! at most 15 digits, a Decimal at most 12 integer and 3 fraction digits, and
//! there is no exponent, `inf` or `NaN`, so every accepted value is finite and
//! exact. `ECT`'s values (`4g`, …) are not valid sf-tokens because they start
//! with a digit; they are matched literally, like Chromium sends them.
//!
//! Hints are advice. Without a hint the response keeps its full fidelity,
//! which is never wrong, only larger; acting on a bad hint could send a
//! degraded variant the client did not ask for. So every doubt reads as "not
//! known":
//! - a value outside the grammar, or outside its bounds (see each field), is
//!   `None`; for `Save-Data` and `Sec-CH-Prefers-Reduced-Data` it is `false`;
//! - a hint sent on several field lines, or under both its `Sec-CH-` and its
//!   legacy name, counts only when every line is well-formed and they all
//!   parse to the same value; otherwise it is malformed. Strict RFC 8941
//!   would reject every repeated Item (the combined `on, on` is not an Item),
//!   but an intermediary re-adding a field it already carried is common, and
//!   identical copies leave exactly one reading. Lines that disagree leave no
//!   way to know which one the client meant, so none is believed.
//!
//! A cacheable response that depends on a hint must name its fields in `Vary`
//! (see [`ACCEPT_CH_FIELDS`]). `RTT` and `Downlink` change all the time, so
//! varying on them splits the cache; a stage acting on them should bucket
//! them and vary on `ECT` or `Save-Data` instead, or make the response private.

use http::header::{HeaderMap, HeaderName};

pub const SAVE_DATA: HeaderName = HeaderName::from_static("save-data");
pub const SEC_CH_PREFERS_REDUCED_DATA: HeaderName =
    HeaderName::from_static("sec-ch-prefers-reduced-data");
pub const ECT: HeaderName = HeaderName::from_static("ect");
pub const RTT: HeaderName = HeaderName::from_static("rtt");
pub const DOWNLINK: HeaderName = HeaderName::from_static("downlink");
pub const SEC_CH_DPR: HeaderName = HeaderName::from_static("sec-ch-dpr");
pub const DPR: HeaderName = HeaderName::from_static("dpr");
pub const SEC_CH_VIEWPORT_WIDTH: HeaderName = HeaderName::from_static("sec-ch-viewport-width");
pub const VIEWPORT_WIDTH: HeaderName = HeaderName::from_static("viewport-width");
pub const SEC_CH_WIDTH: HeaderName = HeaderName::from_static("sec-ch-width");
pub const WIDTH: HeaderName = HeaderName::from_static("width");
pub const SEC_CH_DEVICE_MEMORY: HeaderName = HeaderName::from_static("sec-ch-device-memory");
pub const DEVICE_MEMORY: HeaderName = HeaderName::from_static("device-memory");

/// Every field [`ClientHints::from_headers`] reads, lowercase, for `Accept-CH`
/// (which asks the browser to send them; unknown names are ignored there) and
/// for `Vary` (e.g. through [`crate::vary::add_field`]). A hint read under two
/// names depends on both, so a response acting on it varies on both (e.g.
/// `sec-ch-dpr` and `dpr`). Strings, not `HeaderName`s: a `HeaderName` cannot
/// sit in a constant slice (it holds a `Bytes`, which has interior mutability).
// `Vary` must name only the fields whose hints the response actually used.
pub const ACCEPT_CH_FIELDS: &[&str] = &[
    "save-data",
    "sec-ch-prefers-reduced-data",
    "ect",
    "rtt",
    "downlink",
    "sec-ch-dpr",
    "dpr",
    "sec-ch-viewport-width",
    "viewport-width",
    "sec-ch-width",
    "width",
    "sec-ch-device-memory",
    "device-memory",
];

/// The largest width, in pixels, taken as a real screen or image width.
pub const MAX_WIDTH: u32 = 100_000;

/// The largest device pixel ratio taken as real.
pub const MAX_DPR: f64 = 16.0;

/// The effective connection type (`ECT`), from the slowest to the fastest, so
/// `ect <= Ect::TwoG` reads "2g or slower".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ect {
    /// `slow-2g`: RTT ≥ 2000 ms or downlink ≤ 50 kbit/s.
    Slow2G,
    /// `2g`: RTT ≥ 1400 ms or downlink ≤ 70 kbit/s.
    TwoG,
    /// `3g`: RTT ≥ 270 ms or downlink ≤ 700 kbit/s.
    ThreeG,
    /// `4g`: anything faster.
    FourG,
}

impl Ect {
    /// The field value naming this type (`slow-2g`, `2g`, `3g`, `4g`).
    pub fn as_str(self) -> &'static str {
        match self {
            Ect::Slow2G => "slow-2g",
            Ect::TwoG => "2g",
            Ect::ThreeG => "3g",
            Ect::FourG => "4g",
        }
    }
}

/// The network and device hints of one request. `Default` is "nothing
/// known": no preference, every measurement `None`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientHints {
    /// `Save-Data: on`. Any other value means nothing (the spec defines only
    /// `on`), so absent, other and malformed values are all `false`.
    pub save_data: bool,
    /// `Sec-CH-Prefers-Reduced-Data: reduce`; `false` for `no-preference`,
    /// absent and malformed values alike.
    pub prefers_reduced_data: bool,
    /// `ECT`: exactly `slow-2g`, `2g`, `3g` or `4g` (case-sensitive).
    pub ect: Option<Ect>,
    /// `RTT` in milliseconds: an Integer ≥ 0 (browsers round it to 25 ms).
    pub rtt_ms: Option<u64>,
    /// `Downlink` in kbit/s: the field is Mbit/s, an Integer or Decimal ≥ 0
    /// (browsers round it to 25 kbit/s); its at most three fraction digits
    /// make this exact (`1.175` is 1175).
    pub downlink_kbps: Option<u64>,
    /// `Sec-CH-DPR` or `DPR`: device pixels per CSS pixel, an Integer or
    /// Decimal in (0, [`MAX_DPR`]].
    pub dpr: Option<f64>,
    /// `Sec-CH-Viewport-Width` or `Viewport-Width`: the layout viewport in
    /// CSS pixels, an Integer in 1..=[`MAX_WIDTH`].
    pub viewport_width: Option<u32>,
    /// `Sec-CH-Width` or `Width`: the intended display width of the requested
    /// image in physical pixels, an Integer in 1..=[`MAX_WIDTH`]. Zero is
    /// refused: it names no usable size and would pick the smallest variant.
    pub width: Option<u32>,
    /// `Sec-CH-Device-Memory` or `Device-Memory`: approximate RAM in GiB, an
    /// Integer or Decimal > 0 (browsers send 0.25 to 8).
    pub device_memory_gib: Option<f64>,
}

impl ClientHints {
    /// Reads the hints of a request. See the module documentation for how
    /// repeated, conflicting and malformed fields are read.
    pub fn from_headers(headers: &HeaderMap) -> Self {
        // Most requests carry no hint: one pass over their few names is cheaper than
        // thirteen lookups of names that are not there.
        if !headers.keys().any(|name| HINT_NAMES.contains(name)) {
            return ClientHints::default();
        }
        ClientHints {
            save_data: hint(headers, &[SAVE_DATA], |v| token_is(v, b"on")) == Some(true),
            prefers_reduced_data: hint(headers, &[SEC_CH_PREFERS_REDUCED_DATA], |v| {
                token_is(v, b"reduce")
            }) == Some(true),
            ect: hint(headers, &[ECT], parse_ect),
            rtt_ms: hint(headers, &[RTT], parse_rtt),
            downlink_kbps: hint(headers, &[DOWNLINK], parse_downlink),
            dpr: hint(headers, &[SEC_CH_DPR, DPR], parse_dpr),
            viewport_width: hint(
                headers,
                &[SEC_CH_VIEWPORT_WIDTH, VIEWPORT_WIDTH],
                parse_width,
            ),
            width: hint(headers, &[SEC_CH_WIDTH, WIDTH], parse_width),
            device_memory_gib: hint(
                headers,
                &[SEC_CH_DEVICE_MEMORY, DEVICE_MEMORY],
                parse_device_memory,
            ),
        }
    }

    /// Whether the request carried any usable hint.
    pub fn any(&self) -> bool {
        *self != Self::default()
    }
}

/// Every field [`ClientHints::from_headers`] reads.
static HINT_NAMES: [HeaderName; 13] = [
    SAVE_DATA,
    SEC_CH_PREFERS_REDUCED_DATA,
    ECT,
    RTT,
    DOWNLINK,
    SEC_CH_DPR,
    DPR,
    SEC_CH_VIEWPORT_WIDTH,
    VIEWPORT_WIDTH,
    SEC_CH_WIDTH,
    WIDTH,
    SEC_CH_DEVICE_MEMORY,
    DEVICE_MEMORY,
];

/// The value every line of every name in `names` parses to, if there is at
/// least one line, all are well-formed, and they agree.
fn hint<T: PartialEq>(
    headers: &HeaderMap,
    names: &[HeaderName],
    parse: impl Fn(&[u8]) -> Option<T>,
) -> Option<T> {
    let mut agreed = None;
    for name in names {
        for line in headers.get_all(name) {
            let value = parse(line.as_bytes())?;
            match &agreed {
                None => agreed = Some(value),
                Some(seen) if *seen == value => {}
                Some(_) => return None,
            }
        }
    }
    agreed
}

/// Whether a well-formed token Item is `expected`; `None` when malformed.
fn token_is(value: &[u8], expected: &[u8]) -> Option<bool> {
    item(value, |input| input.token()).map(|token| token == expected)
}

fn parse_ect(value: &[u8]) -> Option<Ect> {
    // The longest run of token characters, without sf-token's rule that the
    // first is a letter, which `2g`, `3g` and `4g` break.
    let name = item(value, |input| Some(input.take_while(is_token_char)))?;
    match name {
        b"slow-2g" => Some(Ect::Slow2G),
        b"2g" => Some(Ect::TwoG),
        b"3g" => Some(Ect::ThreeG),
        b"4g" => Some(Ect::FourG),
        _ => None,
    }
}

fn parse_rtt(value: &[u8]) -> Option<u64> {
    let n = item(value, Input::number)?;
    if n.decimal {
        return None;
    }
    n.non_negative_thousandths().map(|t| t / 1000)
}

fn parse_downlink(value: &[u8]) -> Option<u64> {
    item(value, Input::number)?.non_negative_thousandths()
}

fn parse_dpr(value: &[u8]) -> Option<f64> {
    let dpr = item(value, Input::number)?.positive()?;
    (dpr <= MAX_DPR).then_some(dpr)
}

fn parse_width(value: &[u8]) -> Option<u32> {
    let n = item(value, Input::number)?;
    if n.decimal {
        return None;
    }
    let width = n.non_negative_thousandths()? / 1000;
    u32::try_from(width)
        .ok()
        .filter(|w| (1..=MAX_WIDTH).contains(w))
}

fn parse_device_memory(value: &[u8]) -> Option<f64> {
    item(value, Input::number)?.positive()
}

/// An RFC 8941 Integer or Decimal, exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Number {
    negative: bool,
    decimal: bool,
    /// The magnitude × 1000: at most 15 digits × 1000 for an Integer, so it
    /// always fits.
    thousandths: u64,
}

impl Number {
    /// The value × 1000, if it is not below zero (`-0` is zero).
    fn non_negative_thousandths(self) -> Option<u64> {
        (!self.negative || self.thousandths == 0).then_some(self.thousandths)
    }

    /// The value, if it is above zero.
    fn positive(self) -> Option<f64> {
        // Both operands are exact in f64 (below 2^53), so this is the
        // correctly rounded value of the decimal.
        (!self.negative && self.thousandths > 0).then(|| self.thousandths as f64 / 1000.0)
    }
}

/// Parses a whole field line as an Item whose bare item `bare` reads: OWS
/// around the value is dropped, parameters must be well-formed and are
/// ignored, and nothing may follow them.
fn item<'a, T>(value: &'a [u8], bare: impl FnOnce(&mut Input<'a>) -> Option<T>) -> Option<T> {
    let mut input = Input(trim_ows(value));
    let parsed = bare(&mut input)?;
    input.parameters()?;
    input.0.is_empty().then_some(parsed)
}

fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// The unparsed rest of a field value (RFC 8941 §4.2 works left to right).
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn peek(&self) -> Option<u8> {
        self.0.first().copied()
    }

    /// Consumes `b` if it comes next.
    fn eat(&mut self, b: u8) -> bool {
        match self.0 {
            [first, rest @ ..] if *first == b => {
                self.0 = rest;
                true
            }
            _ => false,
        }
    }

    fn take_while(&mut self, keep: impl Fn(u8) -> bool) -> &'a [u8] {
        let end = self
            .0
            .iter()
            .position(|&b| !keep(b))
            .unwrap_or(self.0.len());
        let (taken, rest) = self.0.split_at(end);
        self.0 = rest;
        taken
    }

    /// RFC 8941 §4.2.4: an Integer (≤ 15 digits) or Decimal (≤ 12 integer
    /// digits, 1 to 3 fraction digits), optionally negative.
    fn number(&mut self) -> Option<Number> {
        let negative = self.eat(b'-');
        let whole = self.take_while(|b| b.is_ascii_digit());
        if whole.is_empty() {
            return None;
        }
        let decimal = self.eat(b'.');
        let fraction = if decimal {
            self.take_while(|b| b.is_ascii_digit())
        } else {
            b""
        };
        let too_long = if decimal {
            whole.len() > 12 || fraction.is_empty() || fraction.len() > 3
        } else {
            whole.len() > 15
        };
        if too_long {
            return None;
        }
        let digits = |s: &[u8]| s.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        let scale = 10u64.pow(3 - fraction.len() as u32);
        Some(Number {
            negative,
            decimal,
            thousandths: digits(whole) * 1000 + digits(fraction) * scale,
        })
    }

    /// RFC 8941 §4.2.6: a letter or `*`, then token characters, `:` or `/`.
    fn token(&mut self) -> Option<&'a [u8]> {
        let first = self.peek()?;
        if !(first.is_ascii_alphabetic() || first == b'*') {
            return None;
        }
        Some(self.take_while(is_token_char))
    }

    /// RFC 8941 §4.2.5: a string of printable ASCII; `\` escapes only `"` and `\`.
    fn string(&mut self) -> Option<()> {
        if !self.eat(b'"') {
            return None;
        }
        loop {
            let run = self.take_while(|b| b != b'"' && b != b'\\');
            if !run.iter().all(|b| (0x20..0x7f).contains(b)) {
                return None;
            }
            if self.eat(b'"') {
                return Some(());
            }
            if !self.eat(b'\\') {
                return None; // unterminated
            }
            if !(self.eat(b'"') || self.eat(b'\\')) {
                return None;
            }
        }
    }

    /// RFC 8941 §4.2.7: base64 characters between colons.
    fn byte_sequence(&mut self) -> Option<()> {
        if !self.eat(b':') {
            return None;
        }
        self.take_while(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b));
        self.eat(b':').then_some(())
    }

    /// RFC 8941 §4.2.3.1: any bare item (for parameter values).
    fn bare_item(&mut self) -> Option<()> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number().map(drop),
            b'"' => self.string(),
            b':' => self.byte_sequence(),
            b'?' => {
                self.eat(b'?');
                (self.eat(b'0') || self.eat(b'1')).then_some(())
            }
            _ => self.token().map(drop),
        }
    }

    /// RFC 8941 §4.2.3.2: `;` SP* key [`=` bare item], any number of times.
    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.take_while(|b| b == b' ');
            let first = self.peek()?;
            if !(first.is_ascii_lowercase() || first == b'*') {
                return None;
            }
            self.take_while(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b)
            });
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }
}

/// RFC 9110 §5.6.2 token characters plus the `:` and `/` sf-tokens allow.
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::test_map as map;

    fn hints(pairs: &[(&str, &[u8])]) -> ClientHints {
        ClientHints::from_headers(&map(pairs))
    }

    #[test]
    fn nothing_known_without_hints() {
        let none = hints(&[("accept", b"*/*")]);
        assert_eq!(none, ClientHints::default());
        assert!(!none.any());
    }

    #[test]
    fn chromium_hints_parse() {
        let h = hints(&[
            ("save-data", b"on"),
            ("sec-ch-prefers-reduced-data", b"reduce"),
            ("ect", b"3g"),
            ("rtt", b"300"),
            ("downlink", b"1.175"),
            ("sec-ch-dpr", b"2.625"),
            ("sec-ch-viewport-width", b"412"),
            ("sec-ch-width", b"1080"),
            ("sec-ch-device-memory", b"0.5"),
        ]);
        assert_eq!(
            h,
            ClientHints {
                save_data: true,
                prefers_reduced_data: true,
                ect: Some(Ect::ThreeG),
                rtt_ms: Some(300),
                downlink_kbps: Some(1175),
                dpr: Some(2.625),
                viewport_width: Some(412),
                width: Some(1080),
                device_memory_gib: Some(0.5),
            }
        );
        assert!(h.any());
    }

    #[test]
    fn each_hint_alone_counts_for_any() {
        for (name, value) in [
            ("save-data", &b"on"[..]),
            ("sec-ch-prefers-reduced-data", b"reduce"),
            ("ect", b"4g"),
            ("rtt", b"0"),
            ("downlink", b"0"),
            ("dpr", b"1"),
            ("viewport-width", b"1"),
            ("width", b"100000"),
            ("device-memory", b"8"),
        ] {
            assert!(hints(&[(name, value)]).any(), "{name}");
        }
    }

    #[test]
    fn ect_values_and_order() {
        for (value, ect) in [
            (&b"slow-2g"[..], Ect::Slow2G),
            (b"2g", Ect::TwoG),
            (b"3g", Ect::ThreeG),
            (b"4g", Ect::FourG),
            (b" 4g;v=1 ", Ect::FourG),
        ] {
            assert_eq!(hints(&[("ect", value)]).ect, Some(ect));
            assert_eq!(hints(&[("ect", ect.as_str().as_bytes())]).ect, Some(ect));
        }
        assert!(Ect::Slow2G < Ect::TwoG && Ect::TwoG < Ect::ThreeG && Ect::ThreeG < Ect::FourG);
        for bad in [
            &b"5g"[..],
            b"4G",
            b"4",
            b"\"4g\"",
            b"4g,4g",
            b"4g 3g",
            b"",
            b"slow-2g;",
        ] {
            assert_eq!(hints(&[("ect", bad)]).ect, None, "{bad:?}");
        }
    }

    #[test]
    fn preferences_only_for_their_token() {
        for on in [&b"on"[..], b" on ", b"on;a=1;b", b"on; q=?0"] {
            assert!(hints(&[("save-data", on)]).save_data, "{on:?}");
        }
        for other in [
            &b"off"[..],
            b"ON",
            b"1",
            b"?1",
            b"\"on\"",
            b"on, on",
            b"on;",
            b"on;A=1",
            b"",
            b"yes please",
        ] {
            assert!(!hints(&[("save-data", other)]).save_data, "{other:?}");
        }
        let reduced = |v: &[u8]| hints(&[("sec-ch-prefers-reduced-data", v)]).prefers_reduced_data;
        assert!(reduced(b"reduce"));
        assert!(!reduced(b"no-preference"));
        assert!(!reduced(b"Reduce"));
        assert!(!hints(&[("sec-ch-prefers-reduced-data", b"no-preference")]).any());
    }

    #[test]
    fn numbers_follow_rfc_8941() {
        let rtt = |v: &[u8]| hints(&[("rtt", v)]).rtt_ms;
        assert_eq!(rtt(b"0"), Some(0));
        assert_eq!(rtt(b"3000"), Some(3000));
        assert_eq!(rtt(b"-0"), Some(0));
        assert_eq!(rtt(b"999999999999999"), Some(999_999_999_999_999));
        for bad in [
            &b"1000000000000000"[..],
            b"50.0",
            b"-25",
            b"+25",
            b"25ms",
            b"1e3",
            b"0x10",
            b"",
            b"inf",
            b"NaN",
            b"\xd9\xa1",
        ] {
            assert_eq!(rtt(bad), None, "{bad:?}");
        }

        let downlink = |v: &[u8]| hints(&[("downlink", v)]).downlink_kbps;
        assert_eq!(downlink(b"10"), Some(10_000));
        assert_eq!(downlink(b"1.175"), Some(1175));
        assert_eq!(downlink(b"0.05"), Some(50));
        assert_eq!(downlink(b"0.0"), Some(0));
        assert_eq!(downlink(b"999999999999.999"), Some(999_999_999_999_999));
        assert_eq!(downlink(b"999999999999999"), Some(999_999_999_999_999_000));
        for bad in [
            &b"1.1755"[..],
            b"1000000000000.5",
            b"1.",
            b".5",
            b"-0.025",
            b"1..5",
            b"1.2.3",
            b"1,5",
            b"nan",
            b"inf",
            b"1e1",
        ] {
            assert_eq!(downlink(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn device_hints_are_bounded() {
        let dpr = |v: &[u8]| hints(&[("sec-ch-dpr", v)]).dpr;
        assert_eq!(dpr(b"1"), Some(1.0));
        assert_eq!(dpr(b"0.001"), Some(0.001));
        assert_eq!(dpr(b"16"), Some(16.0));
        assert_eq!(dpr(b"16.000"), Some(16.0));
        for bad in [
            &b"0"[..],
            b"0.0",
            b"-1",
            b"16.001",
            b"17",
            b"1.7999999523",
            b"NaN",
            b"inf",
        ] {
            assert_eq!(dpr(bad), None, "{bad:?}");
        }

        let width = |v: &[u8]| hints(&[("sec-ch-width", v)]).width;
        assert_eq!(width(b"1"), Some(1));
        assert_eq!(width(b"100000"), Some(100_000));
        for bad in [
            &b"0"[..],
            b"100001",
            b"4294967296",
            b"999999999999999",
            b"-1",
            b"320.5",
            b"320.0",
            b"320px",
        ] {
            assert_eq!(width(bad), None, "{bad:?}");
        }
        assert_eq!(hints(&[("viewport-width", b"100001")]).viewport_width, None);

        let memory = |v: &[u8]| hints(&[("device-memory", v)]).device_memory_gib;
        assert_eq!(memory(b"0.25"), Some(0.25));
        assert_eq!(memory(b"8"), Some(8.0));
        for bad in [&b"0"[..], b"-4", b"0.125x", b"0.0001"] {
            assert_eq!(memory(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn legacy_names_are_read_too() {
        let h = hints(&[
            ("dpr", b"2"),
            ("viewport-width", b"980"),
            ("width", b"640"),
            ("device-memory", b"4"),
        ]);
        assert_eq!(h.dpr, Some(2.0));
        assert_eq!(h.viewport_width, Some(980));
        assert_eq!(h.width, Some(640));
        assert_eq!(h.device_memory_gib, Some(4.0));
    }

    #[test]
    fn repeated_lines_count_only_when_they_agree() {
        // Identical, or equal once parsed (`2` and `2.0`, parameters ignored).
        let h = hints(&[
            ("save-data", b"on"),
            ("save-data", b"on;src=proxy"),
            ("ect", b"2g"),
            ("ect", b"2g"),
            ("sec-ch-dpr", b"2"),
            ("dpr", b"2.0"),
            ("rtt", b"100"),
            ("rtt", b" 100"),
        ]);
        assert!(h.save_data);
        assert_eq!(h.ect, Some(Ect::TwoG));
        assert_eq!(h.dpr, Some(2.0));
        assert_eq!(h.rtt_ms, Some(100));

        // Conflicting, or one malformed line: not known.
        let h = hints(&[
            ("save-data", b"on"),
            ("save-data", b"off"),
            ("ect", b"4g"),
            ("ect", b"slow-2g"),
            ("sec-ch-dpr", b"3"),
            ("dpr", b"1"),
            ("sec-ch-width", b"640"),
            ("sec-ch-width", b"junk"),
            ("downlink", b"10"),
            ("downlink", b""),
        ]);
        assert_eq!(h, ClientHints::default());

        // A combined list on one line is not an Item either.
        assert_eq!(hints(&[("rtt", b"100, 100")]).rtt_ms, None);
        // One bad hint does not spoil the others.
        let h = hints(&[("rtt", b"50"), ("ect", b"4g"), ("ect", b"3g")]);
        assert_eq!((h.rtt_ms, h.ect), (Some(50), None));
    }

    #[test]
    fn parameters_must_be_well_formed() {
        let rtt = |v: &[u8]| hints(&[("rtt", v)]).rtt_ms;
        for ok in [
            &b"50;a"[..],
            b"50;a=1;b=-2.5",
            b"50; a=tok/en:x",
            b"50;a=\"s \\\"q\\\" \\\\\"",
            b"50;a=:AAAA:",
            b"50;a=?1;*b=?0",
            b"50;a_b-c.d*=*",
        ] {
            assert_eq!(rtt(ok), Some(50), "{ok:?}");
        }
        for bad in [
            &b"50;"[..],
            b"50;A=1",
            b"50;1=1",
            b"50 ;a",
            b"50;a=",
            b"50;a=\"open",
            b"50;a=\"\\x\"",
            b"50;a=\"\xc3\xa9\"",
            b"50;a=:AA",
            b"50;a=:A A:",
            b"50;a=?2",
            b"50;a=1.",
            b"50;a=b c",
            b"50;a=(1)",
            b"50\t;a",
        ] {
            assert_eq!(rtt(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn non_utf8_bytes_are_malformed_not_fatal() {
        let h = hints(&[
            ("save-data", b"on\xff"),
            ("ect", b"\xc3\xa94g"),
            ("rtt", b"\x80"),
            ("downlink", b"1.5\xff"),
            ("sec-ch-dpr", b"2;a=\"\xff\""),
            ("sec-ch-width", b"\xff"),
            ("sec-ch-device-memory", b"8;\xe9=1"),
        ]);
        assert_eq!(h, ClientHints::default());
        // Beside a well-formed hint of another name.
        assert_eq!(hints(&[("ect", b"\xff"), ("rtt", b"75")]).rtt_ms, Some(75));
    }

    #[test]
    fn huge_inputs_are_refused_quickly() {
        let digits = vec![b'9'; 1 << 20];
        let mut decimal = b"1.".to_vec();
        decimal.extend(vec![b'5'; 1 << 20]);
        let mut params = b"on".to_vec();
        for _ in 0..50_000 {
            params.extend_from_slice(b";k=\"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\"");
        }
        let h = hints(&[
            ("rtt", &digits),
            ("downlink", &decimal),
            ("sec-ch-width", &digits),
            ("sec-ch-dpr", &decimal),
        ]);
        assert_eq!(h, ClientHints::default());
        // Long but well-formed parameters are read through and ignored.
        assert!(hints(&[("save-data", &params)]).save_data);
        params.push(b';');
        assert!(!hints(&[("save-data", &params)]).save_data);

        let mut many = http::HeaderMap::new();
        for _ in 0..10_000 {
            many.append(ECT, http::HeaderValue::from_static("4g"));
        }
        assert_eq!(ClientHints::from_headers(&many).ect, Some(Ect::FourG));
        many.append(ECT, http::HeaderValue::from_static("3g"));
        assert_eq!(ClientHints::from_headers(&many).ect, None);
    }

    #[test]
    fn accept_ch_fields_name_every_field_read() {
        let names: Vec<&str> = HINT_NAMES.iter().map(HeaderName::as_str).collect();
        assert_eq!(ACCEPT_CH_FIELDS, names);
        for &name in ACCEPT_CH_FIELDS {
            let value: &[u8] = match name {
                "save-data" => b"on",
                "sec-ch-prefers-reduced-data" => b"reduce",
                "ect" => b"4g",
                _ => b"1",
            };
            assert!(hints(&[(name, value)]).any(), "{name}");
        }
    }
}
