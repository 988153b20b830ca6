//! RFC 9842 dictionary-compressed bodies: `dcb` (brotli) and `dcz` (zstd).
//!
//! A body is a fixed header naming the dictionary by its SHA-256, then a stream
//! that uses the dictionary's raw bytes as an LZ77 prefix:
//!
//! | coding | header | stream |
//! |---|---|---|
//! | dcb | `FF 44 43 42` + SHA-256 (36 bytes) | brotli, window ≤ 16 MiB (lgwin ≤ 24) |
//! | dcz | `5E 2A 4D 18 20 00 00 00` + SHA-256 (40 bytes, a zstd skippable frame) | one zstd frame, window ≤ max(8 MiB, 1.25 × dictionary) |
//!
//! Everything here works on whole bodies in memory and is CPU-bound: call it off
//! the async reactor. Measurements behind the choices: `docs/dictionary-codecs.md`.

// FFI to the C brotli encoder: the safe wrapper is the whole module.
#[allow(unsafe_code)]
mod c_brotli;
mod dcb;
mod dcz;
mod train;

use sha2::Digest;

pub use train::train;

/// An RFC 9842 dictionary content coding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DictionaryCoding {
    /// Dictionary-Compressed Brotli.
    Dcb,
    /// Dictionary-Compressed Zstandard.
    Dcz,
}

const DCB_MAGIC: [u8; 4] = [0xff, 0x44, 0x43, 0x42];
/// A zstd skippable frame (magic 0x184D2A5E, little endian) whose 32-byte payload is the hash.
const DCZ_MAGIC: [u8; 8] = [0x5e, 0x2a, 0x4d, 0x18, 0x20, 0x00, 0x00, 0x00];

impl DictionaryCoding {
    pub const ALL: [DictionaryCoding; 2] = [Self::Dcb, Self::Dcz];

    /// The `Content-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Self::Dcb => "dcb",
            Self::Dcz => "dcz",
        }
    }

    /// Parses a token case-insensitively.
    pub fn from_token(token: &str) -> Option<Self> {
        let t = token.trim();
        Self::ALL
            .into_iter()
            .find(|c| t.eq_ignore_ascii_case(c.token()))
    }

    /// Bytes before the compressed stream: magic plus the 32-byte SHA-256.
    pub fn header_len(self) -> usize {
        self.magic().len() + 32
    }

    /// The valid level range (brotli quality, zstd level). C brotli ignores a
    /// dictionary below quality 5, so dcb starts there.
    pub fn levels(self) -> std::ops::RangeInclusive<u32> {
        match self {
            Self::Dcb => 5..=11,
            Self::Dcz => 1..=22,
        }
    }

    fn magic(self) -> &'static [u8] {
        match self {
            Self::Dcb => &DCB_MAGIC,
            Self::Dcz => &DCZ_MAGIC,
        }
    }
}

/// Why a dictionary-compressed body could not be decoded, or a dictionary trained.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DictionaryError {
    #[error("not a {coding} body: wrong magic bytes")]
    BadMagic { coding: &'static str },
    #[error("the {coding} body was compressed with another dictionary (SHA-256 differs)")]
    HashMismatch { coding: &'static str },
    #[error("decoded size exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("truncated {coding} body")]
    Truncated { coding: &'static str },
    #[error("corrupt {coding} body: {detail}")]
    Corrupt {
        coding: &'static str,
        detail: String,
    },
    #[error("cannot train a dictionary: {0}")]
    Training(String),
}

/// SHA-256, the digest RFC 9842 names dictionaries by (over their decoded bytes).
pub fn sha256(data: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(data).into()
}

/// Compresses `data` against `dictionary` into a whole `coding` body, header
/// included. `level` is clamped into [`DictionaryCoding::levels`].
pub fn encode(coding: DictionaryCoding, level: u32, dictionary: &[u8], data: &[u8]) -> Vec<u8> {
    let level = level.clamp(*coding.levels().start(), *coding.levels().end());
    let mut body = header(coding, dictionary);
    match coding {
        DictionaryCoding::Dcb => dcb::encode(level, dictionary, data, &mut body),
        DictionaryCoding::Dcz => dcz::encode(level, dictionary, data, &mut body),
    }
    body
}

/// Decodes a whole `coding` body made against `dictionary`, failing rather than
/// producing more than `limit` bytes. Checks the magic and that the header's hash
/// is SHA-256(`dictionary`) before touching the stream.
pub fn decode(
    coding: DictionaryCoding,
    dictionary: &[u8],
    body: &[u8],
    limit: usize,
) -> Result<Vec<u8>, DictionaryError> {
    let token = coding.token();
    let magic = coding.magic();
    let common = magic.len().min(body.len());
    if body[..common] != magic[..common] {
        return Err(DictionaryError::BadMagic { coding: token });
    }
    if body.len() < coding.header_len() {
        return Err(DictionaryError::Truncated { coding: token });
    }
    if body[magic.len()..coding.header_len()] != sha256(dictionary) {
        return Err(DictionaryError::HashMismatch { coding: token });
    }
    let stream = &body[coding.header_len()..];
    match coding {
        DictionaryCoding::Dcb => dcb::decode(dictionary, stream, limit),
        DictionaryCoding::Dcz => dcz::decode(dictionary, stream, limit),
    }
}

/// The header (magic, then SHA-256 of `dictionary`) that starts every `coding`
/// body: followed by a stream made elsewhere, it makes a whole body.
pub fn header(coding: DictionaryCoding, dictionary: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(coding.header_len() + 1024);
    body.extend_from_slice(coding.magic());
    body.extend_from_slice(&sha256(dictionary));
    body
}

/// The most any decoding step produces; a bomb overshoots its limit by at most this.
const DECODE_STEP: usize = 64 * 1024;

/// Collects decoder output, refusing to grow past `limit`.
struct LimitedOutput {
    bytes: Vec<u8>,
    limit: usize,
    step: Box<[u8]>,
}

impl LimitedOutput {
    fn new(limit: usize) -> Self {
        LimitedOutput {
            bytes: Vec::new(),
            limit,
            step: vec![0; DECODE_STEP].into_boxed_slice(),
        }
    }

    /// Scratch space for the next step: one byte past the limit is enough to see it exceeded.
    fn room(&mut self) -> &mut [u8] {
        let room = (self.limit - self.bytes.len()).saturating_add(1);
        let n = room.min(self.step.len());
        &mut self.step[..n]
    }

    /// Keeps the first `written` bytes of the last `room()`.
    fn commit(&mut self, written: usize) -> Result<(), DictionaryError> {
        if self.bytes.len() + written > self.limit {
            return Err(DictionaryError::TooLarge { limit: self.limit });
        }
        self.bytes.extend_from_slice(&self.step[..written]);
        Ok(())
    }
}
