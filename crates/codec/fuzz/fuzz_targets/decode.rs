//! Hostile deltas: the decoder must never panic, never exceed its limit, and the one-shot
//! and streaming decoders must agree on every input.
//! Input layout: one byte N, then N * 16 bytes of source, then the delta.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirefold_codec::vcdiff::{self, VcdiffDecoder};

const LIMIT: usize = 1 << 16;

fuzz_target!(|input: &[u8]| {
    let Some((&n, rest)) = input.split_first() else {
        return;
    };
    let (source, delta) = rest.split_at((usize::from(n) * 16).min(rest.len()));

    let one_shot = vcdiff::decode(source, delta, LIMIT);
    if let Ok(body) = &one_shot {
        assert!(body.len() <= LIMIT);
    }

    // Chunk sizes vary with the input so window boundaries fall everywhere.
    let chunk = 1 + usize::from(n % 61);
    let mut decoder = VcdiffDecoder::new(source, LIMIT);
    let mut streamed = Vec::new();
    let mut failed = false;
    for piece in delta.chunks(chunk) {
        match decoder.write(piece) {
            Ok(bytes) => streamed.extend(bytes),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    let streaming = if failed {
        None
    } else {
        decoder.finish().ok().map(|()| streamed)
    };
    assert_eq!(
        one_shot.ok(),
        streaming,
        "one-shot and streaming decoders disagree"
    );
});
