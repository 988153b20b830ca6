//! HTTP content codings (RFC 9110 §8.4.1): gzip, deflate, br, zstd.

use std::io::Write;

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

/// Brotli window for one-shot and streaming encodes: 4 MiB covers typical web responses.
const BROTLI_LGWIN: u32 = 22;

/// Compresses `data` in one shot.
pub fn compress(coding: ContentCoding, level: u32, data: &[u8]) -> Vec<u8> {
    let mut enc = Encoder::new(coding, level);
    enc.write(data);
    enc.finish()
}

/// Decompresses `data`, failing rather than producing more than `limit` bytes.
pub fn decompress(coding: ContentCoding, data: &[u8], limit: usize) -> Result<Vec<u8>, DecodeError> {
    let mut dec = Decoder::new(coding, limit);
    dec.write(data)?;
    dec.finish()
}

/// A streaming encoder. Feed chunks with `write`, collect output with `take_output`
/// (whatever the codec has emitted so far) and end with `finish`.
pub struct Encoder {
    inner: EncoderInner,
}

enum EncoderInner {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Deflate(flate2::write::ZlibEncoder<Vec<u8>>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    pub fn new(coding: ContentCoding, level: u32) -> Self {
        let level = coding.clamp_level(level);
        let inner = match coding {
            ContentCoding::Gzip => EncoderInner::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(level),
            )),
            ContentCoding::Deflate => EncoderInner::Deflate(flate2::write::ZlibEncoder::new(
                Vec::new(),
                flate2::Compression::new(level),
            )),
            ContentCoding::Br => EncoderInner::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                64 * 1024,
                level,
                BROTLI_LGWIN,
            ))),
            ContentCoding::Zstd => EncoderInner::Zstd(
                zstd::stream::write::Encoder::new(Vec::new(), level as i32)
                    .expect("zstd context allocation"),
            ),
        };
        Encoder { inner }
    }

    /// Feeds input. Writing into a `Vec` cannot fail, so neither can this.
    pub fn write(&mut self, data: &[u8]) {
        let r = match &mut self.inner {
            EncoderInner::Gzip(e) => e.write_all(data),
            EncoderInner::Deflate(e) => e.write_all(data),
            EncoderInner::Br(e) => e.write_all(data),
            EncoderInner::Zstd(e) => e.write_all(data),
        };
        r.expect("in-memory encoder write");
    }

    /// Takes the output produced so far (possibly empty: codecs buffer input).
    pub fn take_output(&mut self) -> Vec<u8> {
        let buf = match &mut self.inner {
            EncoderInner::Gzip(e) => e.get_mut(),
            EncoderInner::Deflate(e) => e.get_mut(),
            EncoderInner::Br(e) => e.get_mut(),
            EncoderInner::Zstd(e) => e.get_mut(),
        };
        std::mem::take(buf)
    }

    /// Ends the stream and returns the remaining output.
    pub fn finish(self) -> Vec<u8> {
        let r = match self.inner {
            EncoderInner::Gzip(e) => e.finish(),
            EncoderInner::Deflate(e) => e.finish(),
            EncoderInner::Br(mut e) => e.flush().map(|_| e.into_inner()),
            EncoderInner::Zstd(e) => e.finish(),
        };
        r.expect("in-memory encoder finish")
    }
}

/// Why a body could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("decoded size exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("corrupt {coding} data: {detail}")]
    Corrupt { coding: &'static str, detail: String },
    #[error("truncated {coding} data")]
    Truncated { coding: &'static str },
}

/// A streaming decoder that refuses to produce more than `limit` bytes in total
/// (decompression bombs).
pub struct Decoder {
    coding: ContentCoding,
    inner: DecoderInner,
    limit: usize,
    produced: usize,
}

enum DecoderInner {
    Gzip(flate2::write::GzDecoder<Vec<u8>>),
    Deflate(flate2::write::ZlibDecoder<Vec<u8>>),
    Br(Box<brotli::DecompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Decoder<'static, Vec<u8>>),
}

impl Decoder {
    pub fn new(coding: ContentCoding, limit: usize) -> Self {
        let inner = match coding {
            ContentCoding::Gzip => DecoderInner::Gzip(flate2::write::GzDecoder::new(Vec::new())),
            ContentCoding::Deflate => {
                DecoderInner::Deflate(flate2::write::ZlibDecoder::new(Vec::new()))
            }
            ContentCoding::Br => {
                DecoderInner::Br(Box::new(brotli::DecompressorWriter::new(Vec::new(), 64 * 1024)))
            }
            ContentCoding::Zstd => DecoderInner::Zstd(
                zstd::stream::write::Decoder::new(Vec::new()).expect("zstd context allocation"),
            ),
        };
        Decoder { coding, inner, limit, produced: 0 }
    }

    fn corrupt(&self, e: std::io::Error) -> DecodeError {
        DecodeError::Corrupt { coding: self.coding.token(), detail: e.to_string() }
    }

    fn output(&mut self) -> &mut Vec<u8> {
        match &mut self.inner {
            DecoderInner::Gzip(d) => d.get_mut(),
            DecoderInner::Deflate(d) => d.get_mut(),
            DecoderInner::Br(d) => d.get_mut(),
            DecoderInner::Zstd(d) => d.get_mut(),
        }
    }

    fn check_limit(&mut self) -> Result<(), DecodeError> {
        let pending = self.output().len();
        if self.produced + pending > self.limit {
            return Err(DecodeError::TooLarge { limit: self.limit });
        }
        Ok(())
    }

    /// Feeds encoded input. Input is fed in slices so a bomb is caught after at
    /// most one slice's expansion rather than after the whole input.
    pub fn write(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        for piece in data.chunks(16 * 1024) {
            let r = match &mut self.inner {
                DecoderInner::Gzip(d) => d.write_all(piece),
                DecoderInner::Deflate(d) => d.write_all(piece),
                DecoderInner::Br(d) => d.write_all(piece),
                DecoderInner::Zstd(d) => d.write_all(piece),
            };
            r.map_err(|e| self.corrupt(e))?;
            self.check_limit()?;
        }
        Ok(())
    }

    /// Takes the decoded output produced so far.
    pub fn take_output(&mut self) -> Vec<u8> {
        let out = std::mem::take(self.output());
        self.produced += out.len();
        out
    }

    /// Ends the stream, failing if it was truncated, and returns the remaining output.
    pub fn finish(mut self) -> Result<Vec<u8>, DecodeError> {
        let coding = self.coding.token();
        let truncated = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::WriteZero => {
                DecodeError::Truncated { coding }
            }
            _ => DecodeError::Corrupt { coding, detail: e.to_string() },
        };
        let out = match self.inner {
            DecoderInner::Gzip(d) => d.finish().map_err(truncated)?,
            DecoderInner::Deflate(d) => d.finish().map_err(truncated)?,
            DecoderInner::Br(d) => d.into_inner().map_err(|_| DecodeError::Truncated { coding })?,
            DecoderInner::Zstd(mut d) => {
                d.flush().map_err(truncated)?;
                let out = d.into_inner();
                out
            }
        };
        if self.produced + out.len() > self.limit {
            return Err(DecodeError::TooLarge { limit: self.limit });
        }
        Ok(out)
    }
}
