//! HTTP content codings (RFC 9110 §8.4.1): gzip, deflate, br, zstd.
//!
//! Encoders wrap each codec's streaming writer. Decoders drive each codec's raw
//! streaming API directly, one bounded output step at a time, so that
//! - a decompression bomb stops at the limit (never more than one step past it),
//! - the end of the stream is known exactly: a stream cut short is `Truncated`,
//! - bytes after the end are `Corrupt`, except what the formats define as
//!   concatenation: further gzip members (RFC 1952 §2.2) and zstd frames
//!   (RFC 8878 §3).

use std::io::Write;

use wirefold_http::ContentCoding;

/// Largest brotli window (2^22 - 16 bytes): covers typical web responses and bounds
/// the decoder's ring buffer to 4 MiB.
const BROTLI_MAX_LGWIN: u32 = 22;
/// Smallest window the one-shot encoder fits to its input. RFC 7932 allows 10, but at
/// 16 and below the encoder switches to its "forgetful chain" hashers, which in the
/// pure-Rust port cost about 12 ms of setup per call at quality 5-8 (measured on a
/// 17 KB stylesheet: 11.5 ms at lgwin 16 against 0.4 ms at 17).
const BROTLI_MIN_LGWIN: u32 = 17;
/// Brotli keeps 16 bytes of the window for itself.
const BROTLI_WINDOW_OVERHEAD: usize = 16;

/// RFC 9659 §3: a `zstd` content coding uses a window of at most 8 MiB, and decoders
/// may refuse larger ones (which also bounds decoder memory).
const ZSTD_MAX_WINDOW_LOG: u32 = 23;
/// The highest zstd level whose default window respects that limit; the `--ultra`
/// levels above it default to 32-128 MiB windows.
const ZSTD_MAX_LEVEL_WITHIN_WINDOW: u32 = 19;

/// How much an encoder's writer buffers before handing output on.
const ENCODER_BUFFER: usize = 64 * 1024;
/// The most a decoder produces per step; a bomb overshoots its limit by at most this.
const DECODE_STEP: usize = 64 * 1024;

/// Compresses `data` in one shot. Knowing the whole input lets zstd record the
/// content size in its frame header and lets brotli size its window to the input.
///
/// The encoders' working memory is kept for the next call (`reuse`, bounded for the
/// process): brotli's always, zstd's context at the levels that run per request.
pub fn compress(coding: ContentCoding, level: u32, data: &[u8]) -> Vec<u8> {
    let level = coding.clamp_level(level);
    match coding {
        ContentCoding::Br => compress_br(level, data),
        ContentCoding::Zstd => compress_zstd(level, data),
        _ => compress_with_encoder(coding, level, data),
    }
}

/// One shot through a new streaming [`Encoder`] told the input's length.
fn compress_with_encoder(coding: ContentCoding, level: u32, data: &[u8]) -> Vec<u8> {
    let mut enc = Encoder::build(coding, level, Some(data.len()));
    enc.write(data);
    enc.finish()
}

fn compress_br(level: u32, data: &[u8]) -> Vec<u8> {
    if level <= crate::reuse::BROTLI_KEPT_MAX_QUALITY {
        compress_br_with(level, data, crate::reuse::Recycling)
    } else {
        compress_br_with(level, data, brotli::enc::StandardAlloc::default())
    }
}

#[allow(
    clippy::expect_used,
    reason = "reading a slice and writing into a `Vec` cannot fail"
)]
fn compress_br_with(level: u32, data: &[u8], alloc: impl brotli::enc::BrotliAlloc) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() / 3 + 64);
    let mut input_buffer = vec![0; ENCODER_BUFFER.min(data.len().max(1))];
    let mut output_buffer = vec![0; ENCODER_BUFFER];
    brotli::BrotliCompressCustomAlloc(
        &mut &data[..],
        &mut out,
        &mut input_buffer,
        &mut output_buffer,
        &brotli_params(level, Some(data.len())),
        alloc,
    )
    .expect("in-memory brotli compression");
    out
}

fn compress_zstd(level: u32, data: &[u8]) -> Vec<u8> {
    let level_i32 = level as i32;
    if level_i32 <= crate::reuse::ZSTD_KEPT_MAX_LEVEL {
        let reused = crate::reuse::with_zstd(|context| {
            let context = context?;
            context.set_compression_level(level_i32).ok()?;
            context.compress(data).ok()
        });
        if let Some(out) = reused {
            return out;
        }
    }
    compress_with_encoder(ContentCoding::Zstd, level, data)
}

/// brotli's parameters at `level`, with the window fitted to the input when its
/// length is known.
fn brotli_params(level: u32, input_len: Option<usize>) -> brotli::enc::BrotliEncoderParams {
    brotli::enc::BrotliEncoderParams {
        quality: level as i32,
        lgwin: input_len.map_or(BROTLI_MAX_LGWIN, brotli_window_for) as i32,
        size_hint: input_len.unwrap_or(0),
        ..Default::default()
    }
}

/// Decompresses `data`, failing rather than producing more than `limit` bytes.
pub fn decompress(
    coding: ContentCoding,
    data: &[u8],
    limit: usize,
) -> Result<Vec<u8>, DecodeError> {
    let mut dec = Decoder::new(coding, limit);
    dec.write(data)?;
    dec.finish()
}

/// A streaming encoder. Feed chunks with `write`, collect output with `take_output`
/// (whatever the codec has emitted so far; large inputs emit as they go) and end
/// with `finish`.
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
        Self::build(coding, level, None)
    }

    /// `input_len`, when given, is the exact total of what will be written.
    #[allow(
        clippy::expect_used,
        reason = "zstd fails here only to allocate its context (Rust's own allocations \
                  abort on that), and the window log is a constant within zstd's bounds"
    )]
    fn build(coding: ContentCoding, level: u32, input_len: Option<usize>) -> Self {
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
            ContentCoding::Br => EncoderInner::Br(Box::new(brotli::CompressorWriter::with_params(
                Vec::new(),
                ENCODER_BUFFER,
                &brotli_params(level, input_len),
            ))),
            ContentCoding::Zstd => {
                // No checksum (the zstd default): HTTP framing and TLS already guard
                // the bytes, and RFC 9659 leaves it optional.
                let mut enc = zstd::stream::write::Encoder::new(Vec::new(), level as i32)
                    .expect("zstd context allocation");
                if level > ZSTD_MAX_LEVEL_WITHIN_WINDOW {
                    enc.window_log(ZSTD_MAX_WINDOW_LOG)
                        .expect("valid zstd window log");
                }
                if let Some(len) = input_len {
                    enc.set_pledged_src_size(Some(len as u64))
                        .expect("zstd pledged size");
                }
                EncoderInner::Zstd(enc)
            }
        };
        Encoder { inner }
    }

    /// Feeds input. Writing into a `Vec` cannot fail, so neither can this.
    #[allow(
        clippy::expect_used,
        reason = "the encoders write into a `Vec`, which cannot fail"
    )]
    pub fn write(&mut self, data: &[u8]) {
        let r = match &mut self.inner {
            EncoderInner::Gzip(e) => e.write_all(data),
            EncoderInner::Deflate(e) => e.write_all(data),
            EncoderInner::Br(e) => e.write_all(data),
            EncoderInner::Zstd(e) => e.write_all(data),
        };
        r.expect("in-memory encoder write");
    }

    /// Ends the current block so that all input written so far decodes from the
    /// output taken so far (a sync point: costs a few bytes of ratio).
    #[allow(
        clippy::expect_used,
        reason = "the encoders write into a `Vec`, which cannot fail"
    )]
    pub fn flush(&mut self) {
        let r = match &mut self.inner {
            EncoderInner::Gzip(e) => e.flush(),
            EncoderInner::Deflate(e) => e.flush(),
            EncoderInner::Br(e) => e.flush(),
            EncoderInner::Zstd(e) => e.flush(),
        };
        r.expect("in-memory encoder flush");
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
    #[allow(
        clippy::expect_used,
        reason = "the encoders write into a `Vec`, which cannot fail; `compress`, the only \
                  one to pledge a size to zstd, writes exactly that much"
    )]
    pub fn finish(self) -> Vec<u8> {
        match self.inner {
            EncoderInner::Gzip(e) => e.finish().expect("in-memory encoder finish"),
            EncoderInner::Deflate(e) => e.finish().expect("in-memory encoder finish"),
            // `into_inner` ends the stream (a `flush` first would add an empty metablock).
            EncoderInner::Br(e) => e.into_inner(),
            EncoderInner::Zstd(e) => e.finish().expect("in-memory encoder finish"),
        }
    }
}

/// The smallest brotli window that holds `len` bytes, within the allowed range.
fn brotli_window_for(len: usize) -> u32 {
    let mut lgwin = BROTLI_MIN_LGWIN;
    while lgwin < BROTLI_MAX_LGWIN && (1usize << lgwin) - BROTLI_WINDOW_OVERHEAD < len {
        lgwin += 1;
    }
    lgwin
}

/// Why a body could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("decoded size exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("corrupt {coding} data: {detail}")]
    Corrupt {
        coding: &'static str,
        detail: String,
    },
    #[error("truncated {coding} data")]
    Truncated { coding: &'static str },
}

/// A streaming decoder that refuses to produce more than `limit` bytes in total
/// (decompression bombs). After an error every later call returns that error.
pub struct Decoder {
    coding: ContentCoding,
    stream: DecodeStream,
    limit: usize,
    /// Bytes decoded so far, taken or not.
    decoded: usize,
    output: Vec<u8>,
    scratch: Box<[u8]>,
    failure: Option<DecodeError>,
}

impl Decoder {
    pub fn new(coding: ContentCoding, limit: usize) -> Self {
        let stream = match coding {
            ContentCoding::Gzip => DecodeStream::Gzip(GzipStream::new()),
            ContentCoding::Deflate => DecodeStream::Deflate(DeflateStream::new()),
            ContentCoding::Br => DecodeStream::Br(BrotliStream::new()),
            ContentCoding::Zstd => DecodeStream::Zstd(ZstdStream::new()),
        };
        Decoder {
            coding,
            stream,
            limit,
            decoded: 0,
            output: Vec::new(),
            scratch: vec![0; DECODE_STEP].into_boxed_slice(),
            failure: None,
        }
    }

    /// Feeds encoded input.
    pub fn write(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        self.fail_fast()?;
        let result = self.pump(data);
        self.remember(result)
    }

    /// Feeds encoded input but stops once the output not yet taken reaches
    /// `max_output` bytes (overshooting by at most one step, 64 KiB), so a small
    /// input that decodes to a lot never does so in one call. Returns how many bytes
    /// of `data` were consumed. When the output is below `max_output` on return, all
    /// of `data` was consumed and the codec holds nothing more; otherwise take the
    /// output and call again with the rest (empty input drains what the codec holds).
    pub fn write_bounded(&mut self, data: &[u8], max_output: usize) -> Result<usize, DecodeError> {
        self.fail_fast()?;
        let result = self.pump_bounded(data, max_output);
        match result {
            Ok(consumed) => Ok(consumed),
            Err(e) => self.remember(Err(e)).map(|()| 0),
        }
    }

    /// Takes the decoded output produced so far.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// Ends the stream, failing if it was truncated, and returns the remaining output.
    pub fn finish(mut self) -> Result<Vec<u8>, DecodeError> {
        self.fail_fast()?;
        // Empty input drains what the codec still holds.
        self.pump(&[])?;
        if !self.stream.is_complete() {
            return Err(DecodeError::Truncated {
                coding: self.coding.token(),
            });
        }
        Ok(self.output)
    }

    fn fail_fast(&self) -> Result<(), DecodeError> {
        match &self.failure {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn remember(&mut self, result: Result<(), DecodeError>) -> Result<(), DecodeError> {
        if let Err(e) = &result {
            self.failure = Some(e.clone());
        }
        result
    }

    /// Runs the codec over `input` in bounded steps until it needs more input.
    fn pump(&mut self, input: &[u8]) -> Result<(), DecodeError> {
        self.pump_bounded(input, usize::MAX).map(|_| ())
    }

    /// [`Decoder::pump`], stopping early once the untaken output reaches
    /// `max_output`; returns the input consumed.
    fn pump_bounded(&mut self, mut input: &[u8], max_output: usize) -> Result<usize, DecodeError> {
        let total = input.len();
        loop {
            if self.output.len() >= max_output {
                return Ok(total - input.len());
            }
            // One byte of room past the limit is enough to see it exceeded.
            let room = (self.limit - self.decoded)
                .saturating_add(1)
                .min(self.scratch.len());
            let step = self
                .stream
                .step(input, &mut self.scratch[..room])
                .map_err(|detail| DecodeError::Corrupt {
                    coding: self.coding.token(),
                    detail,
                })?;
            self.decoded += step.written;
            if self.decoded > self.limit {
                return Err(DecodeError::TooLarge { limit: self.limit });
            }
            self.output.extend_from_slice(&self.scratch[..step.written]);
            input = &input[step.consumed..];
            if step.consumed == 0 && step.written == 0 {
                return match input.len() {
                    0 => Ok(total),
                    // Every codec either advances on input or rejects it; a guard against looping.
                    n => Err(DecodeError::Corrupt {
                        coding: self.coding.token(),
                        detail: format!("decoder stopped with {n} bytes of input left"),
                    }),
                };
            }
        }
    }
}

/// What one decoding step did.
#[derive(Default)]
struct Step {
    consumed: usize,
    written: usize,
}

impl Step {
    fn add(&mut self, other: Step) {
        self.consumed += other.consumed;
        self.written += other.written;
    }
}

/// A codec's decoding state. `step` decodes from `input` into `output` as far as
/// it can and reports a corrupt stream as a detail string.
enum DecodeStream {
    Gzip(GzipStream),
    Deflate(DeflateStream),
    Br(BrotliStream),
    Zstd(ZstdStream),
}

impl DecodeStream {
    fn step(&mut self, input: &[u8], output: &mut [u8]) -> Result<Step, String> {
        match self {
            Self::Gzip(s) => s.step(input, output),
            Self::Deflate(s) => s.step(input, output),
            Self::Br(s) => s.step(input, output),
            Self::Zstd(s) => s.step(input, output),
        }
    }

    /// Whether the input so far is a whole stream (and more input would be trailing).
    fn is_complete(&self) -> bool {
        match self {
            Self::Gzip(s) => matches!(s.phase, GzipPhase::BetweenMembers),
            Self::Deflate(s) => s.ended,
            Self::Br(s) => s.ended,
            Self::Zstd(s) => s.frames_started && !s.in_frame,
        }
    }
}

/// A step after the stream's end: nothing to do, or input that should not be there.
fn after_end(input: &[u8]) -> Result<Step, String> {
    match input.len() {
        0 => Ok(Step::default()),
        n => Err(trailing_data(n)),
    }
}

fn trailing_data(len: usize) -> String {
    format!("{len} bytes of trailing data after the end of the stream")
}

/// One raw-deflate or zlib stream through flate2, counting what moved.
fn inflate(
    inflater: &mut flate2::Decompress,
    input: &[u8],
    output: &mut [u8],
) -> Result<(Step, bool), String> {
    let (in_before, out_before) = (inflater.total_in(), inflater.total_out());
    let status = inflater
        .decompress(input, output, flate2::FlushDecompress::None)
        .map_err(|e| e.to_string())?;
    let step = Step {
        consumed: (inflater.total_in() - in_before) as usize,
        written: (inflater.total_out() - out_before) as usize,
    };
    Ok((step, status == flate2::Status::StreamEnd))
}

/// `deflate`: one zlib stream (RFC 1950), nothing after it.
struct DeflateStream {
    inflater: flate2::Decompress,
    ended: bool,
}

impl DeflateStream {
    fn new() -> Self {
        DeflateStream {
            inflater: flate2::Decompress::new(true),
            ended: false,
        }
    }

    fn step(&mut self, input: &[u8], output: &mut [u8]) -> Result<Step, String> {
        if self.ended {
            return after_end(input);
        }
        let (step, ended) = inflate(&mut self.inflater, input, output)?;
        self.ended = ended;
        if ended && step.consumed < input.len() {
            return Err(trailing_data(input.len() - step.consumed));
        }
        Ok(step)
    }
}

/// `gzip`: one or more members (RFC 1952), each a header, raw deflate, CRC-32 and length.
struct GzipStream {
    phase: GzipPhase,
    /// Members completed so far: after the first, only another member may follow.
    members: usize,
}

enum GzipPhase {
    Header(GzipHeader),
    Body {
        inflater: flate2::Decompress,
        crc: flate2::Crc,
    },
    Trailer {
        crc: flate2::Crc,
        bytes: [u8; GZIP_TRAILER_LEN],
        have: usize,
    },
    BetweenMembers,
}

const GZIP_TRAILER_LEN: usize = 8;

impl GzipStream {
    fn new() -> Self {
        GzipStream {
            phase: GzipPhase::Header(GzipHeader::new()),
            members: 0,
        }
    }

    fn step(&mut self, input: &[u8], output: &mut [u8]) -> Result<Step, String> {
        let mut done = Step::default();
        loop {
            let (step, next) =
                self.advance(&input[done.consumed..], &mut output[done.written..])?;
            done.add(step);
            match next {
                Some(phase) => self.phase = phase,
                None => return Ok(done),
            }
        }
    }

    /// Works on the current phase; returns the next phase once this one is complete.
    fn advance(
        &mut self,
        input: &[u8],
        output: &mut [u8],
    ) -> Result<(Step, Option<GzipPhase>), String> {
        match &mut self.phase {
            GzipPhase::BetweenMembers => {
                let next = (!input.is_empty()).then(|| GzipPhase::Header(GzipHeader::new()));
                Ok((Step::default(), next))
            }
            GzipPhase::Header(header) => {
                let consumed = header.parse(input, self.members > 0)?;
                let next = header.is_done().then(|| GzipPhase::Body {
                    inflater: flate2::Decompress::new(false),
                    crc: flate2::Crc::new(),
                });
                Ok((
                    Step {
                        consumed,
                        written: 0,
                    },
                    next,
                ))
            }
            GzipPhase::Body { inflater, crc } => {
                let (step, ended) = inflate(inflater, input, output)?;
                crc.update(&output[..step.written]);
                let next = ended.then(|| GzipPhase::Trailer {
                    crc: std::mem::take(crc),
                    bytes: [0; GZIP_TRAILER_LEN],
                    have: 0,
                });
                Ok((step, next))
            }
            GzipPhase::Trailer { crc, bytes, have } => {
                let n = (GZIP_TRAILER_LEN - *have).min(input.len());
                bytes[*have..*have + n].copy_from_slice(&input[..n]);
                *have += n;
                let step = Step {
                    consumed: n,
                    written: 0,
                };
                if *have < GZIP_TRAILER_LEN {
                    return Ok((step, None));
                }
                let [c0, c1, c2, c3, l0, l1, l2, l3] = *bytes;
                if u32::from_le_bytes([c0, c1, c2, c3]) != crc.sum() {
                    return Err("CRC-32 mismatch".into());
                }
                // ISIZE is the member's length modulo 2^32, as is `amount`.
                if u32::from_le_bytes([l0, l1, l2, l3]) != crc.amount() {
                    return Err("length mismatch".into());
                }
                self.members += 1;
                Ok((step, Some(GzipPhase::BetweenMembers)))
            }
        }
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const GZIP_FIXED_LEN: usize = 10;
const GZIP_METHOD_DEFLATE: u8 = 8;
const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;
const FRESERVED: u8 = 0xe0;

/// A gzip member header (RFC 1952 §2.3), parsed byte by byte so that no field,
/// however long, is ever buffered.
struct GzipHeader {
    fixed: [u8; GZIP_FIXED_LEN],
    have: usize,
    field: HeaderField,
    /// CRC-32 of the header bytes so far, for the optional header CRC-16.
    crc: flate2::Crc,
}

/// The header part being read, in RFC 1952 order.
enum HeaderField {
    Fixed,
    ExtraLen { len: [u8; 2], have: usize },
    Extra { left: usize },
    Name,
    Comment,
    Crc16 { bytes: [u8; 2], have: usize },
    Done,
}

impl GzipHeader {
    fn new() -> Self {
        GzipHeader {
            fixed: [0; GZIP_FIXED_LEN],
            have: 0,
            field: HeaderField::Fixed,
            crc: flate2::Crc::new(),
        }
    }

    fn is_done(&self) -> bool {
        matches!(self.field, HeaderField::Done)
    }

    /// Consumes header bytes from `input`; returns how many.
    fn parse(&mut self, input: &[u8], later_member: bool) -> Result<usize, String> {
        for (i, &byte) in input.iter().enumerate() {
            if self.is_done() {
                return Ok(i);
            }
            self.take(byte, later_member)?;
        }
        Ok(input.len())
    }

    fn take(&mut self, byte: u8, later_member: bool) -> Result<(), String> {
        let covered_by_crc16 = !matches!(self.field, HeaderField::Crc16 { .. });
        match &mut self.field {
            HeaderField::Fixed => {
                if self.have < GZIP_MAGIC.len() && byte != GZIP_MAGIC[self.have] {
                    return Err(if later_member {
                        "trailing data after the last gzip member".into()
                    } else {
                        "not gzip data (bad magic)".into()
                    });
                }
                self.fixed[self.have] = byte;
                self.have += 1;
                if self.have == GZIP_FIXED_LEN {
                    if self.fixed[2] != GZIP_METHOD_DEFLATE {
                        return Err(format!("unknown compression method {}", self.fixed[2]));
                    }
                    if self.fixed[3] & FRESERVED != 0 {
                        return Err("reserved header flags set".into());
                    }
                    self.enter_optional_field(0);
                }
            }
            HeaderField::ExtraLen { len, have } => {
                len[*have] = byte;
                *have += 1;
                if *have == len.len() {
                    match u16::from_le_bytes(*len) {
                        0 => self.enter_optional_field(1),
                        left => self.field = HeaderField::Extra { left: left.into() },
                    }
                }
            }
            HeaderField::Extra { left } => {
                *left -= 1;
                if *left == 0 {
                    self.enter_optional_field(1);
                }
            }
            HeaderField::Name if byte == 0 => self.enter_optional_field(2),
            HeaderField::Comment if byte == 0 => self.enter_optional_field(3),
            HeaderField::Name | HeaderField::Comment => {}
            HeaderField::Crc16 { bytes, have } => {
                bytes[*have] = byte;
                *have += 1;
                if *have == bytes.len() {
                    if u32::from(u16::from_le_bytes(*bytes)) != self.crc.sum() & 0xffff {
                        return Err("header CRC mismatch".into());
                    }
                    self.field = HeaderField::Done;
                }
            }
            HeaderField::Done => unreachable!("parse stops at the end of the header"),
        }
        if covered_by_crc16 {
            self.crc.update(&[byte]);
        }
        Ok(())
    }

    /// Moves to the first optional field, at or after position `from` in the order
    /// extra, name, comment, header CRC, that the flags announce.
    fn enter_optional_field(&mut self, from: usize) {
        let flags = self.fixed[3];
        self.field = match from {
            0 if flags & FEXTRA != 0 => HeaderField::ExtraLen {
                len: [0; 2],
                have: 0,
            },
            0..=1 if flags & FNAME != 0 => HeaderField::Name,
            0..=2 if flags & FCOMMENT != 0 => HeaderField::Comment,
            0..=3 if flags & FHCRC != 0 => HeaderField::Crc16 {
                bytes: [0; 2],
                have: 0,
            },
            _ => HeaderField::Done,
        };
    }
}

type BrotliDecoderState = brotli::BrotliState<
    brotli::enc::StandardAlloc,
    brotli::enc::StandardAlloc,
    brotli::enc::StandardAlloc,
>;

/// `br`: one brotli stream (RFC 7932), nothing after it.
struct BrotliStream {
    state: Box<BrotliDecoderState>,
    total_out: usize,
    ended: bool,
}

impl BrotliStream {
    fn new() -> Self {
        let state = BrotliDecoderState::new(
            brotli::enc::StandardAlloc::default(),
            brotli::enc::StandardAlloc::default(),
            brotli::enc::StandardAlloc::default(),
        );
        BrotliStream {
            state: Box::new(state),
            total_out: 0,
            ended: false,
        }
    }

    fn step(&mut self, input: &[u8], output: &mut [u8]) -> Result<Step, String> {
        if self.ended {
            return after_end(input);
        }
        let (mut available_in, mut consumed) = (input.len(), 0);
        let (mut available_out, mut written) = (output.len(), 0);
        let result = brotli::BrotliDecompressStream(
            &mut available_in,
            &mut consumed,
            input,
            &mut available_out,
            &mut written,
            output,
            &mut self.total_out,
            &mut self.state,
        );
        match result {
            brotli::BrotliResult::ResultSuccess => {
                self.ended = true;
                match available_in {
                    0 => Ok(Step { consumed, written }),
                    n => Err(trailing_data(n)),
                }
            }
            brotli::BrotliResult::ResultFailure => Err(format!("{:?}", self.state.error_code)),
            brotli::BrotliResult::NeedsMoreInput | brotli::BrotliResult::NeedsMoreOutput => {
                Ok(Step { consumed, written })
            }
        }
    }
}

/// `zstd`: one or more frames (RFC 8878), skippable frames included.
struct ZstdStream {
    context: zstd::stream::raw::Decoder<'static>,
    frames_started: bool,
    /// Inside a frame that has not been fully decoded and flushed.
    in_frame: bool,
}

impl ZstdStream {
    #[allow(
        clippy::expect_used,
        reason = "zstd fails here only to allocate its context (Rust's own allocations \
                  abort on that), and the window log is a constant within zstd's bounds"
    )]
    fn new() -> Self {
        let mut context = zstd::stream::raw::Decoder::new().expect("zstd context allocation");
        context
            .set_parameter(zstd::stream::raw::DParameter::WindowLogMax(
                ZSTD_MAX_WINDOW_LOG,
            ))
            .expect("valid zstd window log");
        ZstdStream {
            context,
            frames_started: false,
            in_frame: false,
        }
    }

    fn step(&mut self, input: &[u8], output: &mut [u8]) -> Result<Step, String> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let mut input = InBuffer::around(input);
        let mut output = OutBuffer::around(output);
        // 0 means a frame just ended and all of it was flushed.
        let hint = self
            .context
            .run(&mut input, &mut output)
            .map_err(|e| e.to_string())?;
        let step = Step {
            consumed: input.pos(),
            written: output.pos(),
        };
        if step.consumed > 0 || step.written > 0 {
            self.frames_started = true;
            self.in_frame = hint != 0;
        }
        Ok(step)
    }
}
