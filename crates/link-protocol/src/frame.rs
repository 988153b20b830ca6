//! The link protocol's frames: a response body on the link is a sequence of typed,
//! length-prefixed frames, so that data (a stale instance) can flow before the
//! origin has answered. `docs/link-protocol.md` is the specification.
//!
//! ```text
//! frame    = type:u8  length:u32 (big-endian)  payload[length]
//! response = [STALE_BEGIN STALE_DATA*] [PROMISE] outcome pushed*
//! outcome  = HEADERS CONFIRM
//!          | HEADERS (DELTA | FULL) DATA* END
//!          | ERROR                      (may follow any frame)
//! pushed   = PUSH HEADERS (CONFIRM | FULL DATA* END | ERROR)
//! ```
//!
//! PROMISE may also fall between STALE_DATA frames; PUSH frames only follow a
//! PROMISE, after the outcome.
//!
//! Decoding is bounded: a payload longer than [`MAX_PAYLOAD`], an unknown type or a
//! malformed payload is an error for that response only.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use store::Hash;
use wirefold_http::ContentCoding;

/// The largest payload a frame may carry; data is split into frames this size or less.
pub const MAX_PAYLOAD: usize = 1 << 20;
/// Type byte plus length.
const FRAME_HEAD: usize = 5;

/// The request field that marks a link request; its value is the link token, or `1`
/// when the server requires none.
pub const LINK_HEADER: &str = "wirefold-link";
/// The request field naming the instances the client proxy holds for the key and its
/// cluster: SHA-256 hex values, comma separated, at most [`MAX_HAVE`].
pub const HAVE_HEADER: &str = "wirefold-have";
/// The request field asking for the full instance (`full`): sent after a
/// reconstructed instance failed verification.
pub const WANT_HEADER: &str = "wirefold-want";
/// The request field carrying `HEAD` for a browser's HEAD: an HTTP/2 answer to a HEAD
/// request cannot have the body that carries frames, so the link request is a GET.
pub const METHOD_HEADER: &str = "wirefold-method";
/// The most held instances a request may name.
pub const MAX_HAVE: usize = 16;
/// The request field by which a client proxy accepts pushed subresources with the
/// answer to a page request (value `1`).
pub const PUSH_HEADER: &str = "wirefold-push";
/// The request field naming the instances the client proxy holds for the page's
/// origin, so that the server does not push them again: the first
/// [`HELD_PREFIX_HEX`] hex digits of each SHA-256, comma separated, at most
/// [`MAX_HELD`].
pub const HELD_HEADER: &str = "wirefold-held";
/// Hex digits of a SHA-256 in `wirefold-held`: 64 bits, so that 64 of them cost
/// about 1 KiB of request. A prefix that matches by chance only makes the server
/// confirm an instance the client does not hold, which the client refuses.
pub const HELD_PREFIX_HEX: usize = 16;
/// The most instances `wirefold-held` may name.
pub const MAX_HELD: usize = 64;

/// What `wirefold-held` names of an instance: the first 64 bits of its SHA-256,
/// written as [`HELD_PREFIX_HEX`] hex digits.
pub fn held_prefix(hash: &Hash) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash.0[..8]);
    u64::from_be_bytes(first)
}
/// The most URLs one PROMISE may name.
pub const MAX_PROMISED: usize = 64;
/// The response content type of a link response.
pub const CONTENT_TYPE: &str = "application/vnd.wirefold.link";

/// How the bytes of a stale or full instance are coded on the link. A stale stream
/// is flushed at every frame boundary, so every prefix of its frames decodes to a
/// known prefix of the instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkCoding {
    Identity,
    Coded(ContentCoding),
}

/// How a delta is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaFormat {
    /// An RFC 9842 `dcz` body (magic, SHA-256 of the dictionary, zstd stream) whose
    /// dictionary is the first `base_len` bytes of the base.
    Dcz,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// An instance the server holds and the client may not; held until confirmed or
    /// patched, never shown as current. `length` is its decoded length.
    StaleBegin {
        hash: Hash,
        length: u64,
        coding: LinkCoding,
    },
    StaleData(Bytes),
    /// The final status and end-to-end fields for the browser (no `Content-Length`,
    /// no `Content-Encoding`: the client proxy sets those).
    Headers {
        status: StatusCode,
        fields: HeaderMap,
    },
    /// The instance named (the stale one, or one the client holds) is current.
    Confirm {
        hash: Hash,
    },
    /// DATA frames that follow make a delta against the first `base_len` bytes of `base`.
    Delta {
        format: DeltaFormat,
        base: Hash,
        base_len: u64,
    },
    /// DATA frames that follow carry the whole current instance.
    Full {
        coding: LinkCoding,
    },
    Data(Bytes),
    /// The current instance is complete: its SHA-256 and decoded length.
    End {
        hash: Hash,
        length: u64,
    },
    /// The request failed upstream; `status` is what the browser gets.
    Error {
        status: StatusCode,
        message: String,
    },
    /// The page's subresources the server will push after the outcome, in this
    /// order: absolute URLs of the page's own origin, at most [`MAX_PROMISED`].
    Promise {
        urls: Vec<String>,
    },
    /// The pushed response that follows answers `urls[index]` of the PROMISE.
    /// Indexes only grow; one skipped is withdrawn.
    Push {
        index: u16,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame payload of {0} bytes exceeds the {MAX_PAYLOAD}-byte limit")]
    TooLarge(usize),
    #[error("unknown frame type {0:#04x}")]
    UnknownType(u8),
    #[error("malformed {0} frame")]
    Malformed(&'static str),
    #[error("the link response ended inside a frame")]
    Truncated,
}

/// A frame whose payload would pass [`MAX_PAYLOAD`]: nothing of it is sent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{frame} frame payload of {len} bytes exceeds the {MAX_PAYLOAD}-byte limit")]
pub struct OversizedFrame {
    pub frame: &'static str,
    pub len: usize,
}

const STALE_BEGIN: u8 = 0x01;
const STALE_DATA: u8 = 0x02;
const HEADERS: u8 = 0x03;
const CONFIRM: u8 = 0x04;
const DELTA: u8 = 0x05;
const FULL: u8 = 0x06;
const DATA: u8 = 0x07;
const END: u8 = 0x08;
const ERROR: u8 = 0x09;
const PROMISE: u8 = 0x0a;
const PUSH: u8 = 0x0b;

impl LinkCoding {
    fn byte(self) -> u8 {
        match self {
            LinkCoding::Identity => 0,
            LinkCoding::Coded(ContentCoding::Zstd) => 1,
            LinkCoding::Coded(ContentCoding::Br) => 2,
            LinkCoding::Coded(ContentCoding::Gzip) => 3,
            LinkCoding::Coded(ContentCoding::Deflate) => 4,
        }
    }
    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            0 => LinkCoding::Identity,
            1 => LinkCoding::Coded(ContentCoding::Zstd),
            2 => LinkCoding::Coded(ContentCoding::Br),
            3 => LinkCoding::Coded(ContentCoding::Gzip),
            4 => LinkCoding::Coded(ContentCoding::Deflate),
            _ => return None,
        })
    }
}

impl DeltaFormat {
    fn byte(self) -> u8 {
        match self {
            DeltaFormat::Dcz => 1,
        }
    }
    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(DeltaFormat::Dcz),
            _ => None,
        }
    }
}

impl Frame {
    /// The frame's wire bytes. Data longer than [`MAX_PAYLOAD`] is split by the caller
    /// ([`data_frames`]); a header block past it (only hyper's header limits keep
    /// origin fields below it) is an error for this response.
    pub fn encode(&self) -> Result<Bytes, OversizedFrame> {
        let mut payload = BytesMut::new();
        let kind = match self {
            Frame::StaleBegin {
                hash,
                length,
                coding,
            } => {
                payload.put_slice(&hash.0);
                payload.put_u64(*length);
                payload.put_u8(coding.byte());
                STALE_BEGIN
            }
            Frame::StaleData(bytes) => return self.framed(STALE_DATA, bytes),
            Frame::Headers { status, fields } => {
                payload.put_u16(status.as_u16());
                payload.put_u16(fields.len().min(u16::MAX as usize) as u16);
                for (name, value) in fields.iter().take(u16::MAX as usize) {
                    put_string(&mut payload, name.as_str().as_bytes());
                    put_string(&mut payload, value.as_bytes());
                }
                HEADERS
            }
            Frame::Confirm { hash } => {
                payload.put_slice(&hash.0);
                CONFIRM
            }
            Frame::Delta {
                format,
                base,
                base_len,
            } => {
                payload.put_u8(format.byte());
                payload.put_slice(&base.0);
                payload.put_u64(*base_len);
                DELTA
            }
            Frame::Full { coding } => {
                payload.put_u8(coding.byte());
                FULL
            }
            Frame::Data(bytes) => return self.framed(DATA, bytes),
            Frame::End { hash, length } => {
                payload.put_slice(&hash.0);
                payload.put_u64(*length);
                END
            }
            Frame::Error { status, message } => {
                payload.put_u16(status.as_u16());
                payload.put_slice(&message.as_bytes()[..message.len().min(4096)]);
                ERROR
            }
            Frame::Promise { urls } => {
                // More URLs than the protocol allows are not sent: the receiver would
                // refuse the frame.
                let urls = &urls[..urls.len().min(MAX_PROMISED)];
                payload.put_u16(urls.len() as u16);
                for url in urls {
                    put_string(&mut payload, url.as_bytes());
                }
                PROMISE
            }
            Frame::Push { index } => {
                payload.put_u16(*index);
                PUSH
            }
        };
        self.framed(kind, &payload)
    }

    /// `payload` behind this frame's head, if it fits.
    fn framed(&self, kind: u8, payload: &[u8]) -> Result<Bytes, OversizedFrame> {
        if payload.len() > MAX_PAYLOAD {
            return Err(OversizedFrame {
                frame: self.name(),
                len: payload.len(),
            });
        }
        Ok(with_head(kind, payload))
    }

    /// Parses one payload of type `kind`.
    fn decode(kind: u8, mut p: Bytes) -> Result<Frame, FrameError> {
        let frame = match kind {
            STALE_BEGIN => {
                let name = "STALE_BEGIN";
                let hash = take_hash(&mut p, name)?;
                let length = take_u64(&mut p, name)?;
                let coding = LinkCoding::from_byte(take_u8(&mut p, name)?)
                    .ok_or(FrameError::Malformed(name))?;
                Frame::StaleBegin {
                    hash,
                    length,
                    coding,
                }
            }
            STALE_DATA => return Ok(Frame::StaleData(p)),
            HEADERS => {
                let name = "HEADERS";
                let status = StatusCode::from_u16(take_u16(&mut p, name)?)
                    .map_err(|_| FrameError::Malformed(name))?;
                let count = take_u16(&mut p, name)?;
                let mut fields = HeaderMap::new();
                for _ in 0..count {
                    let field = HeaderName::from_bytes(&take_string(&mut p, name)?)
                        .map_err(|_| FrameError::Malformed(name))?;
                    let value = HeaderValue::from_maybe_shared(take_string(&mut p, name)?)
                        .map_err(|_| FrameError::Malformed(name))?;
                    fields.append(field, value);
                }
                Frame::Headers { status, fields }
            }
            CONFIRM => Frame::Confirm {
                hash: take_hash(&mut p, "CONFIRM")?,
            },
            DELTA => {
                let name = "DELTA";
                let format = DeltaFormat::from_byte(take_u8(&mut p, name)?)
                    .ok_or(FrameError::Malformed(name))?;
                let base = take_hash(&mut p, name)?;
                let base_len = take_u64(&mut p, name)?;
                Frame::Delta {
                    format,
                    base,
                    base_len,
                }
            }
            FULL => {
                let coding = LinkCoding::from_byte(take_u8(&mut p, "FULL")?)
                    .ok_or(FrameError::Malformed("FULL"))?;
                Frame::Full { coding }
            }
            DATA => return Ok(Frame::Data(p)),
            END => {
                let hash = take_hash(&mut p, "END")?;
                let length = take_u64(&mut p, "END")?;
                Frame::End { hash, length }
            }
            ERROR => {
                let status = StatusCode::from_u16(take_u16(&mut p, "ERROR")?)
                    .map_err(|_| FrameError::Malformed("ERROR"))?;
                let message = String::from_utf8_lossy(&p).into_owned();
                p.clear();
                Frame::Error { status, message }
            }
            PROMISE => {
                let name = "PROMISE";
                let count = take_u16(&mut p, name)? as usize;
                if count > MAX_PROMISED {
                    return Err(FrameError::Malformed(name));
                }
                let mut urls = Vec::with_capacity(count);
                for _ in 0..count {
                    let url = String::from_utf8(take_string(&mut p, name)?.to_vec())
                        .map_err(|_| FrameError::Malformed(name))?;
                    urls.push(url);
                }
                Frame::Promise { urls }
            }
            PUSH => Frame::Push {
                index: take_u16(&mut p, "PUSH")?,
            },
            other => return Err(FrameError::UnknownType(other)),
        };
        if p.has_remaining() {
            return Err(FrameError::Malformed(frame.name()));
        }
        Ok(frame)
    }

    /// The frame type's name, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Frame::StaleBegin { .. } => "STALE_BEGIN",
            Frame::StaleData(_) => "STALE_DATA",
            Frame::Headers { .. } => "HEADERS",
            Frame::Confirm { .. } => "CONFIRM",
            Frame::Delta { .. } => "DELTA",
            Frame::Full { .. } => "FULL",
            Frame::Data(_) => "DATA",
            Frame::End { .. } => "END",
            Frame::Error { .. } => "ERROR",
            Frame::Promise { .. } => "PROMISE",
            Frame::Push { .. } => "PUSH",
        }
    }
}

/// `bytes` as DATA frames of at most [`MAX_PAYLOAD`] each.
pub fn data_frames(bytes: &[u8]) -> impl Iterator<Item = Bytes> + '_ {
    bytes
        .chunks(MAX_PAYLOAD)
        .map(|chunk| with_head(DATA, chunk))
}

/// A frame of `payload`, which its callers keep within [`MAX_PAYLOAD`].
fn with_head(kind: u8, payload: &[u8]) -> Bytes {
    debug_assert!(payload.len() <= MAX_PAYLOAD);
    let mut out = BytesMut::with_capacity(FRAME_HEAD + payload.len());
    out.put_u8(kind);
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

fn put_string(out: &mut BytesMut, bytes: &[u8]) {
    let len = bytes.len().min(u16::MAX as usize);
    out.put_u16(len as u16);
    out.put_slice(&bytes[..len]);
}

fn take_u8(p: &mut Bytes, name: &'static str) -> Result<u8, FrameError> {
    p.try_get_u8().map_err(|_| FrameError::Malformed(name))
}
fn take_u16(p: &mut Bytes, name: &'static str) -> Result<u16, FrameError> {
    p.try_get_u16().map_err(|_| FrameError::Malformed(name))
}
fn take_u64(p: &mut Bytes, name: &'static str) -> Result<u64, FrameError> {
    p.try_get_u64().map_err(|_| FrameError::Malformed(name))
}
fn take_hash(p: &mut Bytes, name: &'static str) -> Result<Hash, FrameError> {
    let Some(&bytes) = p.first_chunk::<32>() else {
        return Err(FrameError::Malformed(name));
    };
    p.advance(32);
    Ok(Hash(bytes))
}
fn take_string(p: &mut Bytes, name: &'static str) -> Result<Bytes, FrameError> {
    let len = take_u16(p, name)? as usize;
    if p.remaining() < len {
        return Err(FrameError::Malformed(name));
    }
    Ok(p.split_to(len))
}

/// Splits a byte stream into frames as it arrives; holds at most one frame.
#[derive(Default)]
pub struct FrameReader {
    pending: BytesMut,
}

impl FrameReader {
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The next whole frame, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some(&[kind, len @ ..]) = self.pending.first_chunk::<FRAME_HEAD>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_PAYLOAD {
            return Err(FrameError::TooLarge(len));
        }
        if self.pending.len() < FRAME_HEAD + len {
            return Ok(None);
        }
        self.pending.advance(FRAME_HEAD);
        let payload = self.pending.split_to(len).freeze();
        Frame::decode(kind, payload).map(Some)
    }

    /// Called at the end of the stream: leftover bytes mean a cut frame.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.pending.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Truncated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_kinds() -> Vec<Frame> {
        let mut fields = HeaderMap::new();
        fields.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/html"),
        );
        fields.append(http::header::VARY, HeaderValue::from_static("accept"));
        fields.append(http::header::VARY, HeaderValue::from_static("cookie"));
        let h = Hash::of(b"x");
        vec![
            Frame::StaleBegin {
                hash: h,
                length: 123_456,
                coding: LinkCoding::Coded(ContentCoding::Br),
            },
            Frame::StaleData(Bytes::from_static(b"stale")),
            Frame::Headers {
                status: StatusCode::OK,
                fields,
            },
            Frame::Confirm { hash: h },
            Frame::Delta {
                format: DeltaFormat::Dcz,
                base: h,
                base_len: 77,
            },
            Frame::Full {
                coding: LinkCoding::Identity,
            },
            Frame::Full {
                coding: LinkCoding::Coded(ContentCoding::Zstd),
            },
            Frame::Data(Bytes::new()),
            Frame::End { hash: h, length: 5 },
            Frame::Error {
                status: StatusCode::BAD_GATEWAY,
                message: "origin unreachable".into(),
            },
            Frame::Promise {
                urls: vec!["http://a.test/s.css".into(), "http://a.test/é.js".into()],
            },
            Frame::Promise { urls: Vec::new() },
            Frame::Push { index: 1 },
        ]
    }

    #[test]
    fn every_frame_round_trips_byte_by_byte() {
        let frames = all_kinds();
        let wire: Vec<u8> = frames
            .iter()
            .flat_map(|f| f.encode().unwrap().to_vec())
            .collect();
        let mut reader = FrameReader::default();
        let mut out = Vec::new();
        for byte in wire {
            reader.push(&[byte]);
            while let Some(frame) = reader.next_frame().unwrap() {
                out.push(frame);
            }
        }
        reader.finish().unwrap();
        assert_eq!(out, frames);
    }

    #[test]
    fn hostile_frames_are_errors() {
        let mut reader = FrameReader::default();
        reader.push(&[DATA, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(
            reader.next_frame(),
            Err(FrameError::TooLarge(u32::MAX as usize))
        );

        let mut reader = FrameReader::default();
        reader.push(&[0x7f, 0, 0, 0, 0]);
        assert_eq!(reader.next_frame(), Err(FrameError::UnknownType(0x7f)));

        for (kind, payload, name) in [
            (STALE_BEGIN, vec![0u8; 10], "STALE_BEGIN"),
            (CONFIRM, vec![0u8; 33], "CONFIRM"),
            (FULL, vec![9u8], "FULL"),
            (HEADERS, vec![0, 200, 0, 1, 0, 9, b'a'], "HEADERS"),
            (HEADERS, vec![0, 200, 0, 1, 0, 1, b' ', 0, 0], "HEADERS"),
            (HEADERS, vec![0x03, 0xe8, 0, 0], "HEADERS"),
            (PROMISE, vec![0, 1, 0, 2, 0xff, 0xfe], "PROMISE"),
            (PROMISE, vec![0, 65], "PROMISE"),
            (PUSH, vec![0], "PUSH"),
        ] {
            let mut reader = FrameReader::default();
            reader.push(&with_head(kind, &payload));
            assert_eq!(
                reader.next_frame(),
                Err(FrameError::Malformed(name)),
                "{name} {payload:?}"
            );
        }

        let mut reader = FrameReader::default();
        reader.push(
            &Frame::Confirm {
                hash: Hash::of(b""),
            }
            .encode()
            .unwrap()[..10],
        );
        assert_eq!(reader.next_frame(), Ok(None));
        assert_eq!(reader.finish(), Err(FrameError::Truncated));
    }

    #[test]
    fn oversized_frames_are_errors_not_panics() {
        let data = Frame::Data(Bytes::from(vec![0u8; MAX_PAYLOAD + 1]));
        assert_eq!(
            data.encode(),
            Err(OversizedFrame {
                frame: "DATA",
                len: MAX_PAYLOAD + 1
            })
        );
        assert!(Frame::StaleData(Bytes::from(vec![0u8; MAX_PAYLOAD]))
            .encode()
            .is_ok());

        // 17 fields of 64 KiB values: each within a field's bound, the block past the limit.
        let mut fields = HeaderMap::new();
        let value = HeaderValue::from_bytes(&vec![b'v'; u16::MAX as usize]).unwrap();
        for i in 0..17 {
            fields.insert(
                HeaderName::try_from(format!("x-big-{i}")).unwrap(),
                value.clone(),
            );
        }
        let headers = Frame::Headers {
            status: StatusCode::OK,
            fields,
        };
        let err = headers.encode().unwrap_err();
        assert_eq!(err.frame, "HEADERS");
        assert!(err.len > MAX_PAYLOAD);
    }

    #[test]
    fn data_is_split_at_the_payload_limit() {
        let bytes = vec![7u8; MAX_PAYLOAD * 2 + 3];
        let frames: Vec<Bytes> = data_frames(&bytes).collect();
        assert_eq!(frames.len(), 3);
        let mut reader = FrameReader::default();
        let mut total = 0;
        for f in &frames {
            reader.push(f);
            let Some(Frame::Data(d)) = reader.next_frame().unwrap() else {
                panic!("data frame")
            };
            total += d.len();
        }
        assert_eq!(total, bytes.len());
    }
}
