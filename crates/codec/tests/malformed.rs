//! Truncated, corrupt and over-long input: every codec reports a clear error and never panics.

mod common;

use common::{corpus_html, CODINGS};
use wirefold_codec::{compress, decompress, DecodeError, Decoder};
use wirefold_http::ContentCoding;

/// A few kilobytes of the real page: small enough to try every prefix.
fn sample() -> Vec<u8> {
    corpus_html()[..6000].to_vec()
}

#[test]
fn every_proper_prefix_is_truncated() {
    let data = sample();
    for coding in CODINGS {
        let packed = compress(coding, 6, &data);
        for cut in 0..packed.len() {
            assert_eq!(
                decompress(coding, &packed[..cut], usize::MAX),
                Err(DecodeError::Truncated {
                    coding: coding.token()
                }),
                "{coding:?} cut at {cut} of {}",
                packed.len()
            );
        }
    }
}

#[test]
fn truncation_is_reported_at_finish_of_a_streaming_decoder() {
    let data = sample();
    for coding in CODINGS {
        let packed = compress(coding, 6, &data);
        let mut dec = Decoder::new(coding, usize::MAX);
        dec.write(&packed[..packed.len() - 1]).unwrap();
        let partial = dec.take_output();
        assert!(
            data.starts_with(&partial),
            "{coding:?}: partial output is a prefix"
        );
        assert_eq!(
            dec.finish(),
            Err(DecodeError::Truncated {
                coding: coding.token()
            })
        );
    }
}

#[test]
fn trailing_garbage_is_corrupt() {
    let data = sample();
    for coding in CODINGS {
        let mut packed = compress(coding, 6, &data);
        packed.extend_from_slice(b"garbage after the stream");
        match decompress(coding, &packed, usize::MAX) {
            Err(DecodeError::Corrupt { coding: c, detail }) => {
                assert_eq!(c, coding.token());
                assert!(!detail.is_empty());
            }
            other => panic!("{coding:?}: expected Corrupt, got {other:?}"),
        }
    }
}

#[test]
fn trailing_garbage_in_a_later_write_is_corrupt() {
    let data = sample();
    for coding in CODINGS {
        let packed = compress(coding, 6, &data);
        let mut dec = Decoder::new(coding, usize::MAX);
        dec.write(&packed).unwrap();
        let garbage = dec.write(b"\x00\x01garbage");
        assert!(
            matches!(garbage, Err(DecodeError::Corrupt { .. })),
            "{coding:?}: {garbage:?}"
        );
    }
}

#[test]
fn gzip_members_and_zstd_frames_concatenate() {
    for coding in [ContentCoding::Gzip, ContentCoding::Zstd] {
        let mut packed = compress(coding, 6, b"first part, ");
        packed.extend(compress(coding, 6, b"second part"));
        assert_eq!(
            decompress(coding, &packed, 1024).unwrap(),
            b"first part, second part"
        );
    }
}

#[test]
fn empty_body_is_truncated() {
    for coding in CODINGS {
        assert_eq!(
            decompress(coding, b"", 1024),
            Err(DecodeError::Truncated {
                coding: coding.token()
            })
        );
    }
}

#[test]
fn wrong_format_is_corrupt() {
    let page = corpus_html();
    for coding in CODINGS {
        let result = decompress(coding, &page, usize::MAX);
        assert!(
            matches!(result, Err(DecodeError::Corrupt { .. })),
            "{coding:?}: {result:?}"
        );
    }
}

#[test]
fn checksummed_formats_detect_a_flipped_payload_byte() {
    let data = sample();
    for coding in [ContentCoding::Gzip, ContentCoding::Deflate] {
        let packed = compress(coding, 6, &data);
        for at in (20..packed.len() - 8).step_by(97) {
            let mut bad = packed.clone();
            bad[at] ^= 0x10;
            let result = decompress(coding, &bad, usize::MAX);
            assert!(result.is_err(), "{coding:?}: flip at {at} went unnoticed");
        }
    }
}

#[test]
fn gzip_header_fields_are_skipped_and_checked() {
    // FEXTRA + FNAME + FCOMMENT + FHCRC, then the body of a plain member.
    let plain = compress(ContentCoding::Gzip, 6, b"payload");
    let mut header = vec![0x1f, 0x8b, 8, 0x02 | 0x04 | 0x08 | 0x10, 0, 0, 0, 0, 0, 3];
    header.extend([3, 0, b'a', b'b', b'c']);
    header.extend(b"name.txt\0a comment\0");
    let mut crc = flate2::Crc::new();
    crc.update(&header);
    let crc16 = (crc.sum() & 0xffff) as u16;
    let mut member = header.clone();
    member.extend(crc16.to_le_bytes());
    member.extend(&plain[10..]);
    for chunk in [1, member.len()] {
        let mut dec = Decoder::new(ContentCoding::Gzip, 64);
        for piece in member.chunks(chunk) {
            dec.write(piece).unwrap();
        }
        assert_eq!(dec.finish().unwrap(), b"payload");
    }

    let mut bad_crc = header;
    bad_crc.extend((crc16 ^ 1).to_le_bytes());
    bad_crc.extend(&plain[10..]);
    assert!(matches!(
        decompress(ContentCoding::Gzip, &bad_crc, 64),
        Err(DecodeError::Corrupt { detail, .. }) if detail.contains("header CRC")
    ));
}

#[test]
fn errors_are_sticky() {
    for coding in CODINGS {
        let mut dec = Decoder::new(coding, usize::MAX);
        let first = dec
            .write(b"this is not compressed data at all")
            .unwrap_err();
        assert_eq!(
            dec.write(&compress(coding, 6, b"valid")),
            Err(first.clone())
        );
        assert_eq!(dec.finish(), Err(first));
    }
}

/// Cheap deterministic noise for mutation, so failures reproduce.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn mutated_streams_never_panic_or_overrun_the_limit() {
    let data = sample();
    let mut seed = 0x9e37_79b9_7f4a_7c15;
    for coding in CODINGS {
        let packed = compress(coding, 6, &data);
        for _ in 0..300 {
            let mut bad = packed.clone();
            for _ in 0..1 + xorshift(&mut seed) % 4 {
                let at = (xorshift(&mut seed) % bad.len() as u64) as usize;
                bad[at] = xorshift(&mut seed) as u8;
            }
            // Brotli and zstd (without checksum) may decode a mutation to other bytes;
            // what matters is a clean result within the limit.
            if let Ok(out) = decompress(coding, &bad, 2 * data.len()) {
                assert!(out.len() <= 2 * data.len());
            }
        }
    }
}
