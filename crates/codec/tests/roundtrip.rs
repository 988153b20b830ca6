//! Round trips through every content coding: one-shot and streaming, on a real page.

mod common;

use common::{corpus_html, CODINGS};
use wirefold_codec::{compress, decompress, DecodeError, Decoder, Encoder};
use wirefold_http::ContentCoding;

/// Encodes with the streaming encoder, writing `chunk` bytes at a time.
fn encode_streaming(coding: ContentCoding, level: u32, data: &[u8], chunk: usize) -> Vec<u8> {
    let mut enc = Encoder::new(coding, level);
    let mut out = Vec::new();
    for piece in data.chunks(chunk) {
        enc.write(piece);
        out.extend(enc.take_output());
    }
    out.extend(enc.finish());
    out
}

/// Decodes with the streaming decoder, writing `chunk` bytes at a time.
fn decode_streaming(
    coding: ContentCoding,
    data: &[u8],
    chunk: usize,
) -> Result<Vec<u8>, DecodeError> {
    let mut dec = Decoder::new(coding, usize::MAX);
    let mut out = Vec::new();
    for piece in data.chunks(chunk) {
        dec.write(piece)?;
        out.extend(dec.take_output());
    }
    out.extend(dec.finish()?);
    Ok(out)
}

#[test]
fn one_shot_round_trip_at_every_edge_level() {
    let page = corpus_html();
    for coding in CODINGS {
        for level in [*coding.levels().start(), 5, *coding.levels().end()] {
            let packed = compress(coding, level, &page);
            assert!(
                packed.len() < page.len() / 2,
                "{coding:?} {level}: {} bytes",
                packed.len()
            );
            assert_eq!(
                decompress(coding, &packed, page.len()).unwrap(),
                page,
                "{coding:?} {level}"
            );
        }
    }
}

#[test]
fn streaming_round_trip_with_small_and_odd_chunks() {
    let page = corpus_html();
    for coding in CODINGS {
        let packed = encode_streaming(coding, 6, &page, 1000);
        for chunk in [1, 7, 4096, usize::MAX] {
            let chunk = chunk.min(packed.len());
            assert_eq!(
                decode_streaming(coding, &packed, chunk).unwrap(),
                page,
                "{coding:?} by {chunk}"
            );
        }
    }
}

#[test]
fn empty_and_tiny_inputs_round_trip() {
    for coding in CODINGS {
        for data in [&b""[..], b"a", b"\0\0\0"] {
            let packed = compress(coding, 6, data);
            assert_eq!(
                decompress(coding, &packed, 16).unwrap(),
                data,
                "{coding:?} {data:?}"
            );
            let streamed = encode_streaming(coding, 6, data, 1);
            assert_eq!(
                decompress(coding, &streamed, 16).unwrap(),
                data,
                "{coding:?} {data:?}"
            );
        }
    }
}

#[test]
fn limit_equal_to_the_size_passes_and_one_less_fails() {
    let page = corpus_html();
    for coding in CODINGS {
        let packed = compress(coding, 6, &page);
        assert_eq!(decompress(coding, &packed, page.len()).unwrap(), page);
        assert_eq!(
            decompress(coding, &packed, page.len() - 1),
            Err(DecodeError::TooLarge {
                limit: page.len() - 1
            }),
            "{coding:?}"
        );
    }
}

#[test]
fn decoder_counts_taken_output_against_the_limit() {
    let page = corpus_html();
    for coding in CODINGS {
        let packed = compress(coding, 6, &page);
        let mut dec = Decoder::new(coding, page.len() - 1);
        let mut result = Ok(());
        for piece in packed.chunks(64) {
            dec.take_output();
            result = dec.write(piece);
            if result.is_err() {
                break;
            }
        }
        let result = result.and_then(|()| dec.finish().map(drop));
        assert_eq!(
            result,
            Err(DecodeError::TooLarge {
                limit: page.len() - 1
            }),
            "{coding:?}"
        );
    }
}

/// A large, varied input: pages of the corpus repeated with a counter so it does not
/// collapse into long matches.
fn large_text(len: usize) -> Vec<u8> {
    let page = corpus_html();
    let mut out = Vec::with_capacity(len);
    let mut round = 0u32;
    while out.len() < len {
        out.extend(format!("<!-- copy {round} -->").bytes());
        out.extend(&page);
        round += 1;
    }
    out.truncate(len);
    out
}

#[test]
fn streaming_encoders_emit_output_before_finish() {
    let data = large_text(8 << 20);
    for coding in CODINGS {
        let mut enc = Encoder::new(coding, 1);
        let mut emitted_before_finish = 0;
        let mut pieces_with_output = 0;
        for piece in data.chunks(64 * 1024) {
            enc.write(piece);
            let out = enc.take_output();
            emitted_before_finish += out.len();
            pieces_with_output += usize::from(!out.is_empty());
        }
        let tail = enc.finish();
        let total = emitted_before_finish + tail.len();
        // Most of the stream must have left before the end of the input.
        assert!(
            emitted_before_finish > total / 2 && pieces_with_output > 4,
            "{coding:?}: {emitted_before_finish} of {total} bytes before finish, in {pieces_with_output} pieces"
        );
    }
}

#[test]
fn a_flushed_prefix_decodes_to_everything_written_before_the_flush() {
    let page = corpus_html();
    for coding in CODINGS {
        let mut enc = Encoder::new(coding, 9);
        let mut dec = Decoder::new(coding, usize::MAX);
        let mut decoded = Vec::new();
        for (i, piece) in page.chunks(7_000).enumerate() {
            enc.write(piece);
            enc.flush();
            dec.write(&enc.take_output()).unwrap();
            decoded.extend(dec.take_output());
            assert_eq!(
                decoded.len(),
                (i * 7_000 + piece.len()),
                "{coding:?} after chunk {i}"
            );
        }
        dec.write(&enc.finish()).unwrap();
        decoded.extend(dec.finish().unwrap());
        assert_eq!(decoded, page, "{coding:?}");
    }
}

#[test]
fn bounded_writes_hand_out_a_bomb_in_steps_and_lose_nothing() {
    let zeros = vec![0u8; 8 << 20];
    for coding in CODINGS {
        let packed = compress(coding, 6, &zeros);
        let mut dec = Decoder::new(coding, usize::MAX);
        let (mut rest, mut total, mut largest) = (&packed[..], 0usize, 0usize);
        loop {
            let consumed = dec.write_bounded(rest, 1 << 20).unwrap();
            rest = &rest[consumed..];
            let out = dec.take_output();
            assert!(out.iter().all(|&b| b == 0), "{coding:?}");
            largest = largest.max(out.len());
            total += out.len();
            if out.is_empty() && rest.is_empty() {
                break;
            }
        }
        total += dec.finish().unwrap().len();
        assert_eq!(total, zeros.len(), "{coding:?}: every byte comes out");
        assert!(
            largest <= (1 << 20) + 64 * 1024,
            "{coding:?}: one step held {largest} bytes"
        );
    }
}
