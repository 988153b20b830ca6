//! `link_frames`: link response bodies through `FrameReader` and the `Reassembler`.
//!
//! Input: one mode byte, one chunking byte, then the rest.
//! - Mode bit 0 clear: the rest is raw wire bytes.
//! - Mode bit 0 set: the rest is a small program of frames (see [`program`]) that is
//!   encoded with `Frame::encode` first, so that hashes of held instances, valid coded
//!   bodies and valid `dcz` deltas, which random bytes never hit, are reachable.
//!
//! Either way the wire bytes reach a `FrameReader` in chunks whose sizes vary with the
//! chunking byte, and every frame it yields goes to a `Reassembler` that knows a small
//! fixed set of held instances ([`held`]). Invariants checked:
//! - nothing panics;
//! - every decoded frame encodes and decodes back to itself;
//! - a frame pushed after the outcome is refused;
//! - a `Current` outcome's body (whatever `take_unverified` took, then `body`) has the
//!   SHA-256 and length it claims, which are those END announced (or, for CONFIRM, the
//!   instance named); a confirmed held instance is that instance;
//! - nothing but a full body (streamed) is ever larger than the limit.

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;
use codec::dictionary::DictionaryCoding;
use codec::Encoder;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use link_protocol::frame::{DeltaFormat, Frame, FrameReader, LinkCoding};
use link_protocol::reassemble::{Delivery, Outcome, Reassembler};
use sha2::{Digest, Sha256};
use store::Hash;
use wirefold_http::ContentCoding;

/// The reassembler's limit: small, so limit paths are reachable.
const LIMIT: usize = 1 << 16;
/// Streamed full-body bytes past which the driver gives up (a caller would stream on;
/// a decompression bomb would only make the fuzzer slow).
const STREAM_CAP: u64 = 8 << 20;

/// The instances the client holds: empty, short, and one long enough for deltas.
pub fn held() -> &'static HashMap<Hash, Bytes> {
    static HELD: OnceLock<HashMap<Hash, Bytes>> = OnceLock::new();
    HELD.get_or_init(|| {
        instances()
            .iter()
            .map(|body| (Hash::of(body), body.clone()))
            .collect()
    })
}

fn instances() -> &'static [Bytes] {
    static INSTANCES: OnceLock<Vec<Bytes>> = OnceLock::new();
    INSTANCES.get_or_init(make_instances)
}

fn make_instances() -> Vec<Bytes> {
    let long: Vec<u8> = (0..3000u32)
        .flat_map(|i| format!("line {i}: the quick brown fox\n").into_bytes())
        .take(6000)
        .collect();
    vec![
        Bytes::new(),
        Bytes::from_static(b"hello, world\n"),
        Bytes::from(long),
    ]
}

pub fn link_frames(input: &[u8]) {
    run(input);
}

/// [`link_frames`], saying how a verified current instance arrived, if one did.
pub fn run(input: &[u8]) -> Option<Delivery> {
    let [mode, chunking, rest @ ..] = input else {
        return None;
    };
    let wire = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        let mut wire = Vec::new();
        for frame in program(rest) {
            match frame.encode() {
                Ok(bytes) => wire.extend_from_slice(&bytes),
                Err(_) => return None,
            }
        }
        wire
    };
    drive(&wire, *mode, *chunking)
}

/// Feeds `wire` through a `FrameReader` into a `Reassembler` and checks the invariants.
fn drive(wire: &[u8], mode: u8, chunking: u8) -> Option<Delivery> {
    let held = held();
    let mut reader = FrameReader::default();
    let mut reassembler = Reassembler::new(LIMIT);
    if mode & 2 != 0 {
        reassembler.set_output_bound(1 + usize::from(chunking) * 16);
    }
    // Whether to take the streamed output after every DATA frame, or only when told to.
    let stream_eagerly = mode & 4 != 0;
    let mut streamed = Sha256::new();
    let mut streamed_len = 0u64;
    let mut last_end: Option<(Hash, u64)> = None;
    let mut last_confirm: Option<Hash> = None;
    let mut finished = false;
    let mut delivered = None;

    let chunk = 1 + usize::from(chunking % 97);
    let mut pieces = wire.chunks(chunk).peekable();
    while let Some(piece) = pieces.next() {
        reader.push(piece);
        loop {
            let frame = match reader.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => return delivered,
            };
            check_roundtrip(&frame);
            match &frame {
                Frame::End { hash, length } => last_end = Some((*hash, *length)),
                Frame::Confirm { hash } => last_confirm = Some(*hash),
                _ => {}
            }
            while reassembler.has_pending() {
                take(&mut reassembler, &mut streamed, &mut streamed_len);
                if streamed_len > STREAM_CAP || reassembler.resume().is_err() {
                    return delivered;
                }
            }
            let pushed = reassembler.push(frame, held);
            if finished {
                assert!(pushed.is_err(), "a frame after the outcome was accepted");
                return delivered;
            }
            let outcome = match pushed {
                Ok(outcome) => outcome,
                // The response is broken; its caller stops here.
                Err(_) => return delivered,
            };
            if stream_eagerly && reassembler.in_full_body() {
                take(&mut reassembler, &mut streamed, &mut streamed_len);
            }
            if streamed_len > STREAM_CAP {
                return delivered;
            }
            let Some(outcome) = outcome else {
                assert!(
                    reassembler.in_full_body() || reassembler.unverified_len() == 0,
                    "unverified bytes outside a full body"
                );
                continue;
            };
            assert!(
                reassembler.finish().is_ok(),
                "an outcome that is not finished"
            );
            finished = true;
            if let Outcome::Current(current) = outcome {
                streamed.update(&current.body);
                streamed_len += current.body.len() as u64;
                let actual = Hash(std::mem::take(&mut streamed).finalize().into());
                assert_eq!(actual, current.hash, "yielded a body with another hash");
                assert_eq!(
                    streamed_len, current.length,
                    "yielded a body of another length"
                );
                match current.delivery {
                    Delivery::Delta | Delivery::Full => assert_eq!(
                        last_end,
                        Some((current.hash, current.length)),
                        "the outcome is not what END announced"
                    ),
                    Delivery::Confirm => {
                        assert_eq!(last_confirm, Some(current.hash), "confirmed another hash");
                        if let Some(body) = held.get(&current.hash) {
                            assert_eq!(&current.body, body, "a held instance changed");
                        }
                    }
                }
                delivered = Some(current.delivery);
                if current.delivery != Delivery::Full {
                    assert!(current.body.len() <= LIMIT, "an instance over the limit");
                }
            }
        }
        if pieces.peek().is_none() && !finished {
            // The stream ends here: a cut frame or a response without outcome is an error.
            assert!(
                reader.finish().is_err() || reassembler.finish().is_err(),
                "a response without outcome ended cleanly"
            );
        }
    }
    delivered
}

fn take(reassembler: &mut Reassembler, streamed: &mut Sha256, streamed_len: &mut u64) {
    let bytes = reassembler.take_unverified();
    streamed.update(&bytes);
    *streamed_len += bytes.len() as u64;
}

/// `decode(encode(frame)) == frame`, except for ERROR messages that encoding truncates.
fn check_roundtrip(frame: &Frame) {
    if let Frame::Error { message, .. } = frame {
        if message.len() > 4096 {
            return;
        }
    }
    let Ok(wire) = frame.encode() else {
        panic!("a decoded {} frame does not encode", frame.name());
    };
    let mut reader = FrameReader::default();
    reader.push(&wire);
    assert_eq!(
        reader.next_frame(),
        Ok(Some(frame.clone())),
        "frame roundtrip"
    );
    assert_eq!(reader.finish(), Ok(()));
}

/// Reads input bytes as a program; every read past the end gives zeros.
struct Program<'a> {
    bytes: &'a [u8],
}

impl Program<'_> {
    fn byte(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }
    fn slice(&mut self, len: usize) -> &[u8] {
        let (head, rest) = self.bytes.split_at(len.min(self.bytes.len()));
        self.bytes = rest;
        head
    }
    /// A length-prefixed (one byte) slice.
    fn data(&mut self) -> Bytes {
        let len = usize::from(self.byte());
        Bytes::copy_from_slice(self.slice(len))
    }
}

fn coding(b: u8) -> LinkCoding {
    match b % 5 {
        0 => LinkCoding::Identity,
        1 => LinkCoding::Coded(ContentCoding::Zstd),
        2 => LinkCoding::Coded(ContentCoding::Br),
        3 => LinkCoding::Coded(ContentCoding::Gzip),
        _ => LinkCoding::Coded(ContentCoding::Deflate),
    }
}

/// `data` as a coded body that is flushed, like the server's streams (not finished:
/// the server need not end them).
fn coded(coding: LinkCoding, data: &[u8], finish: bool) -> Bytes {
    match coding {
        LinkCoding::Identity => Bytes::copy_from_slice(data),
        LinkCoding::Coded(coding) => {
            let mut encoder = Encoder::new(coding, 1);
            encoder.write(data);
            if finish {
                return encoder.finish().into();
            }
            encoder.flush();
            encoder.take_output().into()
        }
    }
}

/// The frames a program asks for. Each op is one byte (`op % 12`) and its operands:
/// 0 STALE_BEGIN, 1 STALE_DATA, 2 HEADERS, 3 CONFIRM, 4 DELTA, 5 FULL, 6 DATA, 7 END,
/// 8 ERROR, 9 a valid dcz delta between held instances (DELTA, DATA, END), 10 a valid
/// full body of a held instance or input bytes in any coding (FULL, DATA…, END),
/// 11 a valid stale instance (STALE_BEGIN, STALE_DATA…).
/// Hashes are chosen by `Program::hash`: a held instance, the stale/full body built
/// so far, or raw bytes.
pub fn program(bytes: &[u8]) -> Vec<Frame> {
    let mut p = Program { bytes };
    let instances = instances();
    let mut frames = Vec::new();
    // Identity DATA so far: what a plain full body hashes to.
    let mut plain = Vec::new();
    while !p.bytes.is_empty() && frames.len() < 64 {
        match p.byte() % 12 {
            0 => {
                let hash = pick_hash(&mut p, instances, &plain);
                let length = u64::from(p.u16());
                frames.push(Frame::StaleBegin {
                    hash,
                    length,
                    coding: coding(p.byte()),
                });
            }
            1 => frames.push(Frame::StaleData(p.data())),
            2 => {
                let status = p.u16() % 700;
                let Ok(status) = StatusCode::from_u16(status.max(100)) else {
                    continue;
                };
                let mut fields = HeaderMap::new();
                for _ in 0..p.byte() % 4 {
                    let name = p.data();
                    let value = p.data();
                    if let (Ok(name), Ok(value)) = (
                        HeaderName::from_bytes(&name),
                        HeaderValue::from_maybe_shared(value),
                    ) {
                        fields.append(name, value);
                    }
                }
                frames.push(Frame::Headers { status, fields });
            }
            3 => {
                let hash = pick_hash(&mut p, instances, &plain);
                frames.push(Frame::Confirm { hash });
            }
            4 => {
                let base = pick_hash(&mut p, instances, &plain);
                frames.push(Frame::Delta {
                    format: DeltaFormat::Dcz,
                    base,
                    base_len: u64::from(p.u16()),
                });
            }
            5 => frames.push(Frame::Full {
                coding: coding(p.byte()),
            }),
            6 => {
                let data = p.data();
                plain.extend_from_slice(&data);
                frames.push(Frame::Data(data));
            }
            7 => {
                let hash = pick_hash(&mut p, instances, &plain);
                let length = match p.byte() {
                    0 => u64::from(p.u16()),
                    _ => plain.len() as u64,
                };
                frames.push(Frame::End { hash, length });
            }
            8 => {
                let status = StatusCode::from_u16(p.u16() % 700).unwrap_or(StatusCode::BAD_GATEWAY);
                let message = String::from_utf8_lossy(&p.data()).into_owned();
                frames.push(Frame::Error { status, message });
            }
            9 => {
                let base = &instances[usize::from(p.byte()) % instances.len()];
                let target = &instances[usize::from(p.byte()) % instances.len()];
                let base_len = usize::from(p.u16()) % (base.len() + 1);
                let delta =
                    codec::dictionary::encode(DictionaryCoding::Dcz, 1, &base[..base_len], target);
                frames.push(Frame::Delta {
                    format: DeltaFormat::Dcz,
                    base: Hash::of(base),
                    base_len: base_len as u64,
                });
                frames.extend(
                    delta
                        .chunks(1 + usize::from(p.byte()))
                        .map(|c| Frame::Data(Bytes::copy_from_slice(c))),
                );
                frames.push(Frame::End {
                    hash: Hash::of(target),
                    length: target.len() as u64,
                });
            }
            10 => {
                let which = p.byte();
                let body = match instances.get(usize::from(which)) {
                    Some(body) => body.clone(),
                    None => p.data(),
                };
                let link = coding(p.byte());
                let wire = coded(link, &body, which & 0x80 != 0);
                frames.push(Frame::Full { coding: link });
                frames.extend(
                    wire.chunks(1 + usize::from(p.byte()) * 8)
                        .map(|c| Frame::Data(Bytes::copy_from_slice(c))),
                );
                frames.push(Frame::End {
                    hash: Hash::of(&body),
                    length: body.len() as u64,
                });
            }
            _ => {
                let body = p.data();
                let link = coding(p.byte());
                let wire = coded(link, &body, false);
                frames.push(Frame::StaleBegin {
                    hash: Hash::of(&body),
                    length: body.len() as u64,
                    coding: link,
                });
                frames.extend(
                    wire.chunks(1 + usize::from(p.byte()))
                        .map(|c| Frame::StaleData(Bytes::copy_from_slice(c))),
                );
                plain = body.to_vec();
            }
        }
    }
    frames
}

fn pick_hash(p: &mut Program<'_>, instances: &[Bytes], plain: &[u8]) -> Hash {
    match p.byte() % 5 {
        i @ 0..=2 => Hash::of(&instances[usize::from(i)]),
        3 => Hash::of(plain),
        _ => {
            let mut hash = [0; 32];
            for b in &mut hash {
                *b = p.byte();
            }
            Hash(hash)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(name: &str) -> Vec<u8> {
        let path = format!("{}/seeds/link_frames/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The valid seeds reach the verified outcome they were written for, so the fuzzer
    /// starts from the paths that matter.
    #[test]
    fn valid_seeds_are_delivered() {
        for (name, delivery) in [
            ("full-identity-held", Delivery::Full),
            ("full-zstd-streamed", Delivery::Full),
            ("full-brotli-finished", Delivery::Full),
            ("full-gzip-input", Delivery::Full),
            ("raw-full", Delivery::Full),
            ("delta-dcz", Delivery::Delta),
            ("stale-then-delta", Delivery::Delta),
            ("stale-gzip-confirm", Delivery::Confirm),
            ("confirm-held", Delivery::Confirm),
        ] {
            assert_eq!(run(&seed(name)), Some(delivery), "{name}");
        }
        for name in ["error", "raw-truncated", "stale-then-empty-delta"] {
            assert_eq!(run(&seed(name)), None, "{name}");
        }
    }
}
