//! The HTTP content codings wirefold produces and decodes (RFC 9110 §8.4.1), as a
//! name: the codecs themselves are in the `codec` crate.

/// A content coding wirefold can produce and decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContentCoding {
    Gzip,
    /// The zlib format (RFC 1950), which is what `deflate` means in HTTP.
    Deflate,
    Br,
    Zstd,
}

impl ContentCoding {
    pub const ALL: [ContentCoding; 4] = [Self::Br, Self::Zstd, Self::Gzip, Self::Deflate];

    /// The `Content-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Self::Gzip => "gzip",
            Self::Deflate => "deflate",
            Self::Br => "br",
            Self::Zstd => "zstd",
        }
    }

    /// Parses a token case-insensitively; `x-gzip` is an alias of `gzip` (RFC 9110 §8.4.1.3).
    pub fn from_token(token: &str) -> Option<Self> {
        let t = token.trim();
        if t.eq_ignore_ascii_case("gzip") || t.eq_ignore_ascii_case("x-gzip") {
            Some(Self::Gzip)
        } else if t.eq_ignore_ascii_case("deflate") {
            Some(Self::Deflate)
        } else if t.eq_ignore_ascii_case("br") {
            Some(Self::Br)
        } else if t.eq_ignore_ascii_case("zstd") {
            Some(Self::Zstd)
        } else {
            None
        }
    }

    /// The valid level range.
    pub fn levels(self) -> std::ops::RangeInclusive<u32> {
        match self {
            Self::Gzip | Self::Deflate => 1..=9,
            Self::Br => 0..=11,
            Self::Zstd => 1..=22,
        }
    }

    /// Clamps a requested level into the valid range.
    pub fn clamp_level(self, level: u32) -> u32 {
        let r = self.levels();
        level.clamp(*r.start(), *r.end())
    }
}
