//! Turns one link response's frames into the verified current instance. Pure: no I/O;
//! instances the client holds come in through [`HeldInstances`].
//!
//! The grammar (`docs/link-protocol.md`) is enforced frame by frame: anything out of
//! order, a base the request did not name, a length over the limit, corrupt coded data
//! or a SHA-256 that does not match is a [`ReassembleError`] and nothing is yielded.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use codec::dictionary::{DictionaryCoding, DictionaryError};
use codec::{DecodeError, Decoder};
use http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use store::Hash;

use crate::frame::{DeltaFormat, Frame, LinkCoding};

/// Instances the client holds and named in `wirefold-have`, by SHA-256.
pub trait HeldInstances {
    fn body(&self, hash: &Hash) -> Option<Bytes>;
}

impl HeldInstances for HashMap<Hash, Bytes> {
    fn body(&self, hash: &Hash) -> Option<Bytes> {
        self.get(hash).cloned()
    }
}

/// How the current instance reached the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// CONFIRM of the stale instance sent with this response, or of a held one.
    Confirm,
    Delta,
    Full,
}

/// The verified current instance.
#[derive(Debug, PartialEq, Eq)]
pub struct Current {
    pub status: StatusCode,
    pub fields: HeaderMap,
    pub hash: Hash,
    pub length: u64,
    /// The instance's bytes, less whatever [`Reassembler::take_unverified`] took.
    pub body: Bytes,
    pub delivery: Delivery,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Current(Current),
    /// An ERROR frame: the status and message the browser gets.
    Error {
        status: StatusCode,
        message: String,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReassembleError {
    #[error("{frame} frame out of order (after {after})")]
    OutOfOrder {
        frame: &'static str,
        after: &'static str,
    },
    #[error("the link response ended before its outcome")]
    Incomplete,
    #[error("the server named instance {0}, which this request did not offer")]
    UnknownInstance(String),
    #[error("delta base length {base_len} exceeds the {available} bytes of its base")]
    BaseTooShort { base_len: u64, available: usize },
    #[error("{what} of {length} bytes exceeds the {limit}-byte limit")]
    TooLarge {
        what: &'static str,
        length: u64,
        limit: usize,
    },
    #[error("stale data beyond its declared length of {0} bytes")]
    StaleOverrun(u64),
    #[error("CONFIRM of the stale instance after {received} of its {length} bytes")]
    StaleIncomplete { received: usize, length: u64 },
    #[error("stale instance: {0}")]
    StaleCoding(DecodeError),
    #[error("full body: {0}")]
    FullCoding(DecodeError),
    #[error("delta: {0}")]
    Delta(DictionaryError),
    #[error("{frame} frame with status {status}: the browser's status must be 200..=599")]
    BadStatus { frame: &'static str, status: u16 },
    #[error("a frame was pushed before the previous DATA frame was decoded")]
    Undrained,
    #[error("the instance is {actual_length} bytes with SHA-256 {actual}, not {expected_length} bytes with {expected}")]
    Mismatch {
        expected: String,
        expected_length: u64,
        actual: String,
        actual_length: u64,
    },
}

impl ReassembleError {
    /// A reconstruction that did not yield the instance the server named: worth one
    /// more request for the full instance. Everything else is a broken response.
    pub fn is_verification_failure(&self) -> bool {
        match self {
            ReassembleError::Mismatch { .. } => true,
            ReassembleError::Delta(e) => !matches!(e, DictionaryError::TooLarge { .. }),
            _ => false,
        }
    }
}

/// The held instance a frame refers to (CONFIRM or DELTA), so the caller can load
/// it before pushing the frame.
pub fn referenced_instance(frame: &Frame) -> Option<Hash> {
    match frame {
        Frame::Confirm { hash } => Some(*hash),
        Frame::Delta { base, .. } => Some(*base),
        _ => None,
    }
}

struct Stale {
    hash: Hash,
    length: u64,
    /// `None`: identity coding.
    decoder: Option<Decoder>,
    bytes: BytesMut,
}

impl Stale {
    fn append(&mut self, data: &[u8]) -> Result<(), ReassembleError> {
        match &mut self.decoder {
            Some(decoder) => {
                decoder.write(data).map_err(|e| match e {
                    DecodeError::TooLarge { .. } => ReassembleError::StaleOverrun(self.length),
                    e => ReassembleError::StaleCoding(e),
                })?;
                self.bytes.extend_from_slice(&decoder.take_output());
            }
            None => {
                if (self.bytes.len() + data.len()) as u64 > self.length {
                    return Err(ReassembleError::StaleOverrun(self.length));
                }
                self.bytes.extend_from_slice(data);
            }
        }
        Ok(())
    }
}

enum Phase {
    Start,
    /// The stale instance arriving; HEADERS moves it to `Reassembler::stale`.
    Stale(Box<Stale>),
    /// HEADERS arrived; the outcome is next.
    Headers,
    DeltaBody {
        base: Bytes,
        body: BytesMut,
    },
    FullBody {
        /// `None`: identity coding.
        decoder: Option<Box<Decoder>>,
        /// Coded bytes of the last DATA frame not yet decoded.
        pending: Bytes,
        /// The last decoding step stopped at the output bound: the decoder may hold
        /// more output even when `pending` is empty.
        stalled: bool,
    },
    Done,
}

/// Consumes one response's frames in order; see the module documentation.
pub struct Reassembler {
    limit: usize,
    /// A full body's decoding stops once this many decoded bytes wait untaken; see
    /// [`Reassembler::resume`].
    output_bound: usize,
    phase: Phase,
    last_frame: &'static str,
    stale: Option<Stale>,
    head: Option<(StatusCode, HeaderMap)>,
    /// Decoded full-body bytes not yet taken.
    output: BytesMut,
    hasher: Sha256,
    produced: u64,
}

impl Reassembler {
    /// `limit` bounds every instance held in memory: the stale one, a delta and its
    /// result. A full body's total is not bounded here (its caller streams it once it
    /// exceeds `limit`), but its decoding is: a DATA frame is decoded only until
    /// `limit + 1` bytes wait untaken (plus at most one 64 KiB decoder step); the
    /// rest waits for [`Reassembler::resume`].
    pub fn new(limit: usize) -> Self {
        Reassembler {
            limit,
            output_bound: limit.saturating_add(1),
            phase: Phase::Start,
            last_frame: "the start",
            stale: None,
            head: None,
            output: BytesMut::new(),
            hasher: Sha256::new(),
            produced: 0,
        }
    }

    /// Takes the next frame. `Some` once the outcome is known; the response must end
    /// there (a later frame is out of order).
    pub fn push(
        &mut self,
        frame: Frame,
        held: &dyn HeldInstances,
    ) -> Result<Option<Outcome>, ReassembleError> {
        let name = frame.name();
        if self.has_pending() {
            return Err(ReassembleError::Undrained);
        }
        if let Frame::Headers { status, .. } | Frame::Error { status, .. } = &frame {
            if !(200..=599).contains(&status.as_u16()) {
                return Err(ReassembleError::BadStatus {
                    frame: name,
                    status: status.as_u16(),
                });
            }
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        let (next, outcome) = self.step(phase, frame, held)?;
        self.phase = next;
        self.last_frame = name;
        Ok(outcome)
    }

    /// The response ended: it must have reached its outcome.
    pub fn finish(&self) -> Result<(), ReassembleError> {
        match self.phase {
            Phase::Done => Ok(()),
            _ => Err(ReassembleError::Incomplete),
        }
    }

    /// The status and fields of HEADERS, once it arrived.
    pub fn head(&self) -> Option<(StatusCode, &HeaderMap)> {
        self.head.as_ref().map(|(status, fields)| (*status, fields))
    }

    /// Whether a full body is arriving (the only kind that may be streamed).
    pub fn in_full_body(&self) -> bool {
        matches!(self.phase, Phase::FullBody { .. })
    }

    /// Whether the last DATA frame of a full body is not all decoded yet: take the
    /// output and call [`Reassembler::resume`] until it is, before the next frame.
    pub fn has_pending(&self) -> bool {
        matches!(self.phase, Phase::FullBody { stalled: true, .. })
    }

    /// Decodes more of the last DATA frame, again only until the output bound.
    pub fn resume(&mut self) -> Result<(), ReassembleError> {
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        let Phase::FullBody {
            decoder: Some(mut decoder),
            mut pending,
            stalled: true,
        } = phase
        else {
            self.phase = phase;
            return Ok(());
        };
        let stalled = self.decode_some(&mut decoder, &mut pending)?;
        self.phase = Phase::FullBody {
            decoder: Some(decoder),
            pending,
            stalled,
        };
        Ok(())
    }

    /// Once streaming, decode a full body in steps of `bytes` (the caller takes each).
    pub fn set_output_bound(&mut self, bytes: usize) {
        self.output_bound = bytes.max(1);
    }

    /// Decodes `pending` until it is used up or the output bound is reached; whether
    /// it stopped at the bound.
    fn decode_some(
        &mut self,
        decoder: &mut Decoder,
        pending: &mut Bytes,
    ) -> Result<bool, ReassembleError> {
        let room = self.output_bound.saturating_sub(self.output.len());
        if room == 0 {
            return Ok(true);
        }
        let consumed = decoder
            .write_bounded(pending, room)
            .map_err(ReassembleError::FullCoding)?;
        let _ = pending.split_to(consumed);
        let decoded = decoder.take_output();
        self.produce(&decoded);
        Ok(decoded.len() >= room)
    }

    /// Bytes of the full body decoded and not yet taken.
    pub fn unverified_len(&self) -> usize {
        self.output.len()
    }

    /// Takes the full body decoded so far, not yet verified: the caller streams it and
    /// must fail its consumer unless END then verifies.
    pub fn take_unverified(&mut self) -> Bytes {
        self.output.split().freeze()
    }

    fn step(
        &mut self,
        phase: Phase,
        frame: Frame,
        held: &dyn HeldInstances,
    ) -> Result<(Phase, Option<Outcome>), ReassembleError> {
        match (phase, frame) {
            (phase, Frame::Error { status, message }) if !matches!(phase, Phase::Done) => {
                Ok((Phase::Done, Some(Outcome::Error { status, message })))
            }
            (
                Phase::Start,
                Frame::StaleBegin {
                    hash,
                    length,
                    coding,
                },
            ) => {
                self.check_limit("stale instance", length)?;
                let decoder = match coding {
                    LinkCoding::Identity => None,
                    LinkCoding::Coded(coding) => Some(Decoder::new(coding, length as usize)),
                };
                let stale = Stale {
                    hash,
                    length,
                    decoder,
                    bytes: BytesMut::new(),
                };
                Ok((Phase::Stale(Box::new(stale)), None))
            }
            (Phase::Stale(mut stale), Frame::StaleData(data)) => {
                stale.append(&data)?;
                Ok((Phase::Stale(stale), None))
            }
            (phase @ (Phase::Start | Phase::Stale(_)), Frame::Headers { status, fields }) => {
                if let Phase::Stale(stale) = phase {
                    self.stale = Some(*stale);
                }
                self.head = Some((status, fields));
                Ok((Phase::Headers, None))
            }
            (Phase::Headers, Frame::Confirm { hash }) => {
                let body = self.confirmed(&hash, held)?;
                let length = body.len() as u64;
                verify(&hash, length, &Hash::of(&body), length)?;
                let current = self.current(hash, length, body, Delivery::Confirm);
                Ok((Phase::Done, Some(current)))
            }
            (
                Phase::Headers,
                Frame::Delta {
                    format: DeltaFormat::Dcz,
                    base,
                    base_len,
                },
            ) => {
                let base = self.delta_base(&base, base_len, held)?;
                Ok((
                    Phase::DeltaBody {
                        base,
                        body: BytesMut::new(),
                    },
                    None,
                ))
            }
            (Phase::Headers, Frame::Full { coding }) => {
                let decoder = match coding {
                    LinkCoding::Identity => None,
                    // Bounded per step instead (`decode_some`): streamed bodies may be long.
                    LinkCoding::Coded(coding) => Some(Box::new(Decoder::new(coding, usize::MAX))),
                };
                Ok((
                    Phase::FullBody {
                        decoder,
                        pending: Bytes::new(),
                        stalled: false,
                    },
                    None,
                ))
            }
            (Phase::DeltaBody { base, mut body }, Frame::Data(data)) => {
                self.check_limit("delta", (body.len() + data.len()) as u64)?;
                body.extend_from_slice(&data);
                Ok((Phase::DeltaBody { base, body }, None))
            }
            (Phase::FullBody { mut decoder, .. }, Frame::Data(mut data)) => {
                let stalled = match &mut decoder {
                    Some(d) => self.decode_some(d, &mut data)?,
                    None => {
                        self.produce(&data);
                        data.clear();
                        false
                    }
                };
                Ok((
                    Phase::FullBody {
                        decoder,
                        pending: data,
                        stalled,
                    },
                    None,
                ))
            }
            (Phase::DeltaBody { base, body }, Frame::End { hash, length }) => {
                let instance =
                    codec::dictionary::decode(DictionaryCoding::Dcz, &base, &body, self.limit)
                        .map_err(ReassembleError::Delta)?;
                let actual_length = instance.len() as u64;
                verify(&hash, length, &Hash::of(&instance), actual_length)?;
                let current = self.current(hash, length, instance.into(), Delivery::Delta);
                Ok((Phase::Done, Some(current)))
            }
            // The server flushes its zstd stream at every frame and need not end it: what
            // was decoded is the whole body, and the hash says whether it is right.
            (Phase::FullBody { .. }, Frame::End { hash, length }) => {
                let hasher = std::mem::take(&mut self.hasher);
                verify(
                    &hash,
                    length,
                    &Hash(hasher.finalize().into()),
                    self.produced,
                )?;
                let body = self.take_unverified();
                let current = self.current(hash, length, body, Delivery::Full);
                Ok((Phase::Done, Some(current)))
            }
            (_, frame) => Err(ReassembleError::OutOfOrder {
                frame: frame.name(),
                after: self.last_frame,
            }),
        }
    }

    fn check_limit(&self, what: &'static str, length: u64) -> Result<(), ReassembleError> {
        if length > self.limit as u64 {
            return Err(ReassembleError::TooLarge {
                what,
                length,
                limit: self.limit,
            });
        }
        Ok(())
    }

    fn produce(&mut self, decoded: &[u8]) {
        self.hasher.update(decoded);
        self.produced += decoded.len() as u64;
        self.output.extend_from_slice(decoded);
    }

    #[allow(
        clippy::expect_used,
        reason = "called only in the Headers phase and the body phases after it, which \
                  HEADERS enters after setting `head`; taken only here, on the way to Done"
    )]
    fn current(&mut self, hash: Hash, length: u64, body: Bytes, delivery: Delivery) -> Outcome {
        let (status, fields) = self.head.take().expect("the outcome follows HEADERS");
        Outcome::Current(Current {
            status,
            fields,
            hash,
            length,
            body,
            delivery,
        })
    }

    /// The instance a CONFIRM names: the stale one when all of it arrived, else a held one.
    fn confirmed(&self, hash: &Hash, held: &dyn HeldInstances) -> Result<Bytes, ReassembleError> {
        if let Some(stale) = self.stale.as_ref().filter(|s| s.hash == *hash) {
            if stale.bytes.len() as u64 == stale.length {
                return Ok(Bytes::copy_from_slice(&stale.bytes));
            }
            return held.body(hash).ok_or(ReassembleError::StaleIncomplete {
                received: stale.bytes.len(),
                length: stale.length,
            });
        }
        held.body(hash)
            .ok_or_else(|| ReassembleError::UnknownInstance(hash.to_hex()))
    }

    /// The first `base_len` bytes of a delta's base: the stale prefix received, or a
    /// held instance.
    fn delta_base(
        &self,
        base: &Hash,
        base_len: u64,
        held: &dyn HeldInstances,
    ) -> Result<Bytes, ReassembleError> {
        let stale = self.stale.as_ref().filter(|s| s.hash == *base);
        if let Some(stale) = stale {
            if base_len <= stale.bytes.len() as u64 {
                return Ok(Bytes::copy_from_slice(&stale.bytes[..base_len as usize]));
            }
        }
        let body = match (held.body(base), stale) {
            (Some(body), _) => body,
            (None, Some(stale)) => {
                return Err(ReassembleError::BaseTooShort {
                    base_len,
                    available: stale.bytes.len(),
                })
            }
            (None, None) => return Err(ReassembleError::UnknownInstance(base.to_hex())),
        };
        if base_len > body.len() as u64 {
            return Err(ReassembleError::BaseTooShort {
                base_len,
                available: body.len(),
            });
        }
        Ok(body.slice(..base_len as usize))
    }
}

fn verify(
    expected: &Hash,
    expected_length: u64,
    actual: &Hash,
    actual_length: u64,
) -> Result<(), ReassembleError> {
    if expected == actual && expected_length == actual_length {
        return Ok(());
    }
    Err(ReassembleError::Mismatch {
        expected: expected.to_hex(),
        expected_length,
        actual: actual.to_hex(),
        actual_length,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;
    use codec::Encoder;
    use wirefold_http::ContentCoding;

    const LIMIT: usize = 1 << 20;

    fn headers() -> Frame {
        let mut fields = HeaderMap::new();
        fields.insert(http::header::CONTENT_TYPE, "text/plain".parse().unwrap());
        Frame::Headers {
            status: StatusCode::OK,
            fields,
        }
    }

    fn end(body: &[u8]) -> Frame {
        Frame::End {
            hash: Hash::of(body),
            length: body.len() as u64,
        }
    }

    fn data(bytes: &[u8]) -> Frame {
        Frame::Data(Bytes::copy_from_slice(bytes))
    }

    /// zstd, flushed after each piece as the server sends it: one frame per piece.
    fn zstd_pieces(pieces: &[&[u8]]) -> Vec<Bytes> {
        let mut encoder = Encoder::new(ContentCoding::Zstd, 3);
        pieces
            .iter()
            .map(|piece| {
                encoder.write(piece);
                encoder.flush();
                Bytes::from(encoder.take_output())
            })
            .collect()
    }

    fn stale_frames(body: &[u8], pieces: &[&[u8]]) -> Vec<Frame> {
        let mut frames = vec![Frame::StaleBegin {
            hash: Hash::of(body),
            length: body.len() as u64,
            coding: LinkCoding::Coded(ContentCoding::Zstd),
        }];
        frames.extend(zstd_pieces(pieces).into_iter().map(Frame::StaleData));
        frames
    }

    /// Pushes every frame; the outcome must come with the last one.
    fn run(frames: Vec<Frame>, held: &HashMap<Hash, Bytes>) -> Result<Outcome, ReassembleError> {
        let mut r = Reassembler::new(LIMIT);
        let count = frames.len();
        for (i, frame) in frames.into_iter().enumerate() {
            if let Some(outcome) = r.push(frame, held)? {
                assert_eq!(i + 1, count, "outcome before the last frame");
                r.finish().unwrap();
                return Ok(outcome);
            }
        }
        r.finish()
            .map(|()| unreachable!("no outcome yet finish passed"))
    }

    fn current(outcome: Outcome) -> Current {
        match outcome {
            Outcome::Current(c) => c,
            other => panic!("expected an instance, got {other:?}"),
        }
    }

    fn none() -> HashMap<Hash, Bytes> {
        HashMap::new()
    }

    fn holding(body: &[u8]) -> HashMap<Hash, Bytes> {
        HashMap::from([(Hash::of(body), Bytes::copy_from_slice(body))])
    }

    #[test]
    fn full_identity_in_pieces() {
        let body = b"hello, full world";
        let c = current(
            run(
                vec![
                    headers(),
                    Frame::Full {
                        coding: LinkCoding::Identity,
                    },
                    data(&body[..5]),
                    data(&body[5..]),
                    end(body),
                ],
                &none(),
            )
            .unwrap(),
        );
        assert_eq!(&c.body[..], body);
        assert_eq!(c.delivery, Delivery::Full);
        assert_eq!(c.length, body.len() as u64);
        assert_eq!(c.fields["content-type"], "text/plain");
    }

    #[test]
    fn full_zstd_flushed_per_frame() {
        let body = b"one two three four five six seven".repeat(50);
        let mut frames = vec![
            headers(),
            Frame::Full {
                coding: LinkCoding::Coded(ContentCoding::Zstd),
            },
        ];
        frames.extend(
            zstd_pieces(&[&body[..100], &body[100..]])
                .into_iter()
                .map(Frame::Data),
        );
        frames.push(end(&body));
        let c = current(run(frames, &none()).unwrap());
        assert_eq!(&c.body[..], &body[..]);
    }

    #[test]
    fn streamed_full_body_is_still_verified_whole() {
        let body = b"0123456789".repeat(10);
        let mut r = Reassembler::new(LIMIT);
        for f in [
            headers(),
            Frame::Full {
                coding: LinkCoding::Identity,
            },
            data(&body[..40]),
        ] {
            assert!(r.push(f, &none()).unwrap().is_none());
        }
        assert!(r.in_full_body());
        assert_eq!(r.unverified_len(), 40);
        assert_eq!(&r.take_unverified()[..], &body[..40]);
        r.push(data(&body[40..]), &none()).unwrap();
        let c = current(r.push(end(&body), &none()).unwrap().unwrap());
        assert_eq!(&c.body[..], &body[40..]);
        assert_eq!(c.length, 100);

        let mut r = Reassembler::new(LIMIT);
        for f in [
            headers(),
            Frame::Full {
                coding: LinkCoding::Identity,
            },
            data(&body),
        ] {
            r.push(f, &none()).unwrap();
        }
        r.take_unverified();
        let err = r.push(end(b"something else"), &none()).unwrap_err();
        assert!(err.is_verification_failure(), "{err}");
    }

    #[test]
    fn stale_then_confirm() {
        let body = b"the stale instance, still current".repeat(20);
        let mut frames = stale_frames(&body, &[&body[..200], &body[200..]]);
        frames.push(headers());
        frames.push(Frame::Confirm {
            hash: Hash::of(&body),
        });
        let c = current(run(frames, &none()).unwrap());
        assert_eq!(&c.body[..], &body[..]);
        assert_eq!(c.delivery, Delivery::Confirm);
    }

    #[test]
    fn confirm_of_a_held_instance() {
        let body = b"held";
        let frames = vec![
            headers(),
            Frame::Confirm {
                hash: Hash::of(body),
            },
        ];
        let c = current(run(frames.clone(), &holding(body)).unwrap());
        assert_eq!(&c.body[..], body);
        assert!(matches!(
            run(frames, &none()),
            Err(ReassembleError::UnknownInstance(_))
        ));
    }

    #[test]
    fn confirm_of_a_stale_instance_cut_short_is_refused() {
        let body = b"abcdefghij".repeat(10);
        let mut frames = stale_frames(&body, &[&body[..30]]);
        frames.push(headers());
        frames.push(Frame::Confirm {
            hash: Hash::of(&body),
        });
        assert_eq!(
            run(frames, &none()),
            Err(ReassembleError::StaleIncomplete {
                received: 30,
                length: 100
            })
        );
    }

    #[test]
    fn stale_prefix_then_delta() {
        let old = b"<html>version one of the page, with a long shared tail</html>".repeat(8);
        let new = b"<html>version two of the page, with a long shared tail</html>".repeat(8);
        let prefix = 300;
        let delta = codec::dictionary::encode(DictionaryCoding::Dcz, 3, &old[..prefix], &new);
        let mut frames = stale_frames(&old, &[&old[..100], &old[100..prefix]]);
        frames.extend([
            headers(),
            Frame::Delta {
                format: DeltaFormat::Dcz,
                base: Hash::of(&old),
                base_len: prefix as u64,
            },
            data(&delta[..10]),
            data(&delta[10..]),
            end(&new),
        ]);
        let c = current(run(frames, &none()).unwrap());
        assert_eq!(&c.body[..], &new[..]);
        assert_eq!(c.delivery, Delivery::Delta);
    }

    /// A stale stream stopped for a FULL one (an abort, or a cut-through of an
    /// instance that diverged early): the stale bytes are dropped, never shown.
    #[test]
    fn stale_prefix_then_full() {
        let old = b"the stale instance, abandoned".repeat(20);
        let new = b"an unrelated new instance".repeat(20);
        let mut frames = stale_frames(&old, &[&old[..100], &old[100..200]]);
        frames.extend([
            headers(),
            Frame::Full {
                coding: LinkCoding::Coded(ContentCoding::Zstd),
            },
        ]);
        frames.extend(
            zstd_pieces(&[&new[..50], &new[50..]])
                .into_iter()
                .map(Frame::Data),
        );
        frames.push(end(&new));
        let c = current(run(frames, &none()).unwrap());
        assert_eq!(&c.body[..], &new[..]);
        assert_eq!(c.delivery, Delivery::Full);
    }

    #[test]
    fn delta_against_a_held_instance() {
        let old = b"held base, version 1".repeat(10);
        let new = b"held base, version 2".repeat(10);
        let delta = codec::dictionary::encode(DictionaryCoding::Dcz, 3, &old, &new);
        let frames = vec![
            headers(),
            Frame::Delta {
                format: DeltaFormat::Dcz,
                base: Hash::of(&old),
                base_len: old.len() as u64,
            },
            data(&delta),
            end(&new),
        ];
        let c = current(run(frames, &holding(&old)).unwrap());
        assert_eq!(&c.body[..], &new[..]);
    }

    #[test]
    fn error_frame_ends_the_response_anywhere() {
        let error = Frame::Error {
            status: StatusCode::GATEWAY_TIMEOUT,
            message: "origin timed out".into(),
        };
        let expected = Outcome::Error {
            status: StatusCode::GATEWAY_TIMEOUT,
            message: "origin timed out".into(),
        };
        let mut after_stale = stale_frames(b"abc", &[b"ab"]);
        after_stale.push(error.clone());
        assert_eq!(run(after_stale, &none()).unwrap(), expected);
        let after_full = vec![
            headers(),
            Frame::Full {
                coding: LinkCoding::Identity,
            },
            data(b"partial"),
            error.clone(),
        ];
        assert_eq!(run(after_full, &none()).unwrap(), expected);
        assert_eq!(run(vec![error], &none()).unwrap(), expected);
    }

    #[test]
    fn every_frame_out_of_order_is_an_error() {
        let h = Hash::of(b"x");
        let begin = Frame::StaleBegin {
            hash: h,
            length: 1,
            coding: LinkCoding::Identity,
        };
        let full = Frame::Full {
            coding: LinkCoding::Identity,
        };
        let delta = Frame::Delta {
            format: DeltaFormat::Dcz,
            base: h,
            base_len: 0,
        };
        let confirm = Frame::Confirm { hash: h };
        let stale = Frame::StaleData(Bytes::from_static(b"x"));
        let error = Frame::Error {
            status: StatusCode::BAD_GATEWAY,
            message: String::new(),
        };
        let cases: Vec<Vec<Frame>> = vec![
            vec![stale.clone()],
            vec![confirm.clone()],
            vec![delta.clone()],
            vec![full.clone()],
            vec![data(b"x")],
            vec![end(b"x")],
            vec![begin.clone(), begin.clone()],
            vec![begin.clone(), confirm.clone()],
            vec![begin.clone(), full.clone()],
            vec![begin.clone(), data(b"x")],
            vec![begin.clone(), end(b"x")],
            vec![headers(), headers()],
            vec![headers(), begin.clone()],
            vec![headers(), stale.clone()],
            vec![headers(), data(b"x")],
            vec![headers(), end(b"x")],
            vec![headers(), full.clone(), stale.clone()],
            vec![headers(), full.clone(), confirm.clone()],
            vec![headers(), full.clone(), full.clone()],
            vec![headers(), full.clone(), headers()],
            vec![headers(), full.clone(), data(b"x"), end(b"x"), data(b"x")],
            vec![
                headers(),
                full.clone(),
                data(b"x"),
                end(b"x"),
                error.clone(),
            ],
            vec![error.clone(), headers()],
            vec![error, error_frame()],
        ];
        for frames in cases {
            let names: Vec<&str> = frames.iter().map(Frame::name).collect();
            let held = holding(b"x");
            let mut r = Reassembler::new(LIMIT);
            let mut result = Ok(None);
            for f in frames {
                result = r.push(f, &held);
                if result.is_err() {
                    break;
                }
            }
            assert!(
                matches!(result, Err(ReassembleError::OutOfOrder { .. })),
                "{names:?}: {result:?}"
            );
        }
        assert_eq!(
            run(vec![headers(), delta.clone(), stale], &holding(b"x")),
            Err(ReassembleError::OutOfOrder {
                frame: "STALE_DATA",
                after: "DELTA"
            })
        );
    }

    fn error_frame() -> Frame {
        Frame::Error {
            status: StatusCode::BAD_GATEWAY,
            message: "again".into(),
        }
    }

    #[test]
    fn a_truncated_response_has_no_outcome() {
        for frames in [
            vec![],
            stale_frames(b"abc", &[b"abc"]),
            vec![headers()],
            vec![
                headers(),
                Frame::Full {
                    coding: LinkCoding::Identity,
                },
                data(b"abc"),
            ],
        ] {
            assert_eq!(run(frames, &none()), Err(ReassembleError::Incomplete));
        }
        let mut cut = zstd_pieces(&[b"a zstd body that is cut"])[0].to_vec();
        cut.truncate(cut.len() / 2);
        let frames = vec![
            headers(),
            Frame::Full {
                coding: LinkCoding::Coded(ContentCoding::Zstd),
            },
            data(&cut),
            end(b"a zstd body that is cut"),
        ];
        let err = run(frames, &none()).unwrap_err();
        assert!(err.is_verification_failure(), "{err}");
    }

    #[test]
    fn corrupt_zstd_is_an_error() {
        let begin = Frame::StaleBegin {
            hash: Hash::of(b"x"),
            length: 10,
            coding: LinkCoding::Coded(ContentCoding::Zstd),
        };
        let garbage = Frame::StaleData(Bytes::from_static(b"\x28\xb5\x2f\xfd garbage!!"));
        let err = run(vec![begin, garbage], &none()).unwrap_err();
        assert!(matches!(err, ReassembleError::StaleCoding(_)), "{err}");
        let frames = vec![
            headers(),
            Frame::Full {
                coding: LinkCoding::Coded(ContentCoding::Zstd),
            },
            data(b"not zstd at all"),
        ];
        let err = run(frames, &none()).unwrap_err();
        assert!(matches!(err, ReassembleError::FullCoding(_)), "{err}");
        assert!(!err.is_verification_failure());
    }

    #[test]
    fn wrong_hashes_are_verification_failures() {
        let full = vec![
            headers(),
            Frame::Full {
                coding: LinkCoding::Identity,
            },
            data(b"what arrived"),
            end(b"what was promised"),
        ];
        let wrong_length = vec![
            headers(),
            Frame::Full {
                coding: LinkCoding::Identity,
            },
            data(b"abc"),
            Frame::End {
                hash: Hash::of(b"abc"),
                length: 4,
            },
        ];
        let old = b"base one".repeat(10);
        let delta = codec::dictionary::encode(DictionaryCoding::Dcz, 3, &old, b"result");
        let bad_delta = vec![
            headers(),
            Frame::Delta {
                format: DeltaFormat::Dcz,
                base: Hash::of(&old),
                base_len: old.len() as u64,
            },
            data(&delta),
            end(b"another result"),
        ];
        // The stale stream claims a hash its bytes do not have.
        let mut lying_stale = vec![Frame::StaleBegin {
            hash: Hash::of(b"claimed"),
            length: 6,
            coding: LinkCoding::Identity,
        }];
        lying_stale.extend([
            Frame::StaleData(Bytes::from_static(b"actual")),
            headers(),
            Frame::Confirm {
                hash: Hash::of(b"claimed"),
            },
        ]);
        for frames in [full, wrong_length, bad_delta, lying_stale] {
            let err = run(frames, &holding(&old)).unwrap_err();
            assert!(
                matches!(err, ReassembleError::Mismatch { .. }) && err.is_verification_failure(),
                "{err}"
            );
        }
    }

    #[test]
    fn a_delta_against_another_base_fails_verification() {
        let old = b"base one".repeat(10);
        let other = b"base two".repeat(10);
        let delta = codec::dictionary::encode(DictionaryCoding::Dcz, 3, &other, b"result");
        let frames = vec![
            headers(),
            Frame::Delta {
                format: DeltaFormat::Dcz,
                base: Hash::of(&old),
                base_len: old.len() as u64,
            },
            data(&delta),
            end(b"result"),
        ];
        let err = run(frames, &holding(&old)).unwrap_err();
        assert!(err.is_verification_failure(), "{err}");
    }

    #[test]
    fn huge_lengths_are_refused() {
        let huge_stale = vec![Frame::StaleBegin {
            hash: Hash::of(b"x"),
            length: u64::MAX,
            coding: LinkCoding::Coded(ContentCoding::Zstd),
        }];
        assert!(matches!(
            run(huge_stale, &none()),
            Err(ReassembleError::TooLarge { .. })
        ));

        let overrun = vec![
            Frame::StaleBegin {
                hash: Hash::of(b"abc"),
                length: 3,
                coding: LinkCoding::Identity,
            },
            Frame::StaleData(Bytes::from_static(b"abcd")),
        ];
        assert_eq!(run(overrun, &none()), Err(ReassembleError::StaleOverrun(3)));
        let mut zstd_overrun = vec![Frame::StaleBegin {
            hash: Hash::of(b"abc"),
            length: 3,
            coding: LinkCoding::Coded(ContentCoding::Zstd),
        }];
        zstd_overrun.extend(
            zstd_pieces(&[&[7u8; 4096]])
                .into_iter()
                .map(Frame::StaleData),
        );
        assert_eq!(
            run(zstd_overrun, &none()),
            Err(ReassembleError::StaleOverrun(3))
        );

        let base = b"short base";
        let long_base = vec![
            headers(),
            Frame::Delta {
                format: DeltaFormat::Dcz,
                base: Hash::of(base),
                base_len: u64::MAX,
            },
        ];
        assert_eq!(
            run(long_base, &holding(base)),
            Err(ReassembleError::BaseTooShort {
                base_len: u64::MAX,
                available: base.len()
            })
        );
        let mut beyond_stale_prefix = stale_frames(b"abcdef", &[b"abc"]);
        beyond_stale_prefix.extend([
            headers(),
            Frame::Delta {
                format: DeltaFormat::Dcz,
                base: Hash::of(b"abcdef"),
                base_len: 6,
            },
        ]);
        assert_eq!(
            run(beyond_stale_prefix, &none()),
            Err(ReassembleError::BaseTooShort {
                base_len: 6,
                available: 3
            })
        );

        // A delta that decodes beyond the limit (a bomb) is refused, not verified.
        let bomb = vec![0u8; LIMIT + 1];
        let delta = codec::dictionary::encode(DictionaryCoding::Dcz, 3, base, &bomb);
        let frames = vec![
            headers(),
            Frame::Delta {
                format: DeltaFormat::Dcz,
                base: Hash::of(base),
                base_len: base.len() as u64,
            },
            data(&delta),
            end(&bomb),
        ];
        let err = run(frames, &holding(base)).unwrap_err();
        assert!(
            matches!(
                err,
                ReassembleError::Delta(DictionaryError::TooLarge { .. })
            ),
            "{err}"
        );
        assert!(!err.is_verification_failure());

        let mut r = Reassembler::new(16);
        r.push(headers(), &none()).unwrap();
        r.push(
            Frame::Delta {
                format: DeltaFormat::Dcz,
                base: Hash::of(base),
                base_len: 1,
            },
            &holding(base),
        )
        .unwrap();
        assert!(matches!(
            r.push(data(&[0u8; 17]), &none()),
            Err(ReassembleError::TooLarge { what: "delta", .. })
        ));
    }

    #[test]
    fn a_full_body_bomb_is_decoded_in_bounded_steps() {
        const SMALL: usize = 64 << 10;
        const STEP: usize = 64 << 10; // the decoder's step
        let zeros = vec![0u8; 64 << 20];
        let bomb = codec::compress(ContentCoding::Zstd, 19, &zeros);
        assert!(bomb.len() < frame::MAX_PAYLOAD);
        let mut r = Reassembler::new(SMALL);
        for f in [
            headers(),
            Frame::Full {
                coding: LinkCoding::Coded(ContentCoding::Zstd),
            },
            Frame::Data(bomb.into()),
        ] {
            assert!(r.push(f, &none()).unwrap().is_none());
        }
        // One frame decoded only just past the limit; the rest waits.
        assert!(r.unverified_len() > SMALL);
        assert!(
            r.unverified_len() <= SMALL + 1 + STEP,
            "{}",
            r.unverified_len()
        );
        assert!(r.has_pending());
        assert_eq!(
            r.push(end(&zeros), &none()),
            Err(ReassembleError::Undrained)
        );
        // Streamed: taken in steps of at most the bound (plus one decoder step).
        let bound = 1 << 20;
        r.set_output_bound(bound);
        let mut total = r.take_unverified().len();
        while r.has_pending() {
            r.resume().unwrap();
            let piece = r.take_unverified();
            assert!(piece.len() <= bound + STEP, "{}", piece.len());
            total += piece.len();
        }
        assert_eq!(total, zeros.len());
        let c = current(r.push(end(&zeros), &none()).unwrap().unwrap());
        assert_eq!(c.length, zeros.len() as u64);
    }

    #[test]
    fn statuses_outside_200_to_599_are_refused() {
        let informational = Frame::Headers {
            status: StatusCode::SWITCHING_PROTOCOLS,
            fields: HeaderMap::new(),
        };
        assert_eq!(
            run(vec![informational], &none()),
            Err(ReassembleError::BadStatus {
                frame: "HEADERS",
                status: 101
            })
        );
        let error = Frame::Error {
            status: StatusCode::CONTINUE,
            message: "continue?".into(),
        };
        assert_eq!(
            run(vec![error], &none()),
            Err(ReassembleError::BadStatus {
                frame: "ERROR",
                status: 100
            })
        );
    }

    #[test]
    fn referenced_instances() {
        let h = Hash::of(b"x");
        assert_eq!(referenced_instance(&Frame::Confirm { hash: h }), Some(h));
        assert_eq!(
            referenced_instance(&Frame::Delta {
                format: DeltaFormat::Dcz,
                base: h,
                base_len: 1
            }),
            Some(h)
        );
        assert_eq!(referenced_instance(&headers()), None);
    }
}
