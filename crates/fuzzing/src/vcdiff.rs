//! `vcdiff_decode` and `vcdiff_roundtrip`: RFC 3284 deltas (`226 IM Used` bodies and
//! the link's deltas) through `codec::vcdiff`.
//!
//! `vcdiff_decode` input: one byte N, then N × 16 bytes of source, then the delta.
//! Invariants: no panic, never more than the limit, and the one-shot and streaming
//! decoders agree on every input (the stream is cut into pieces whose size varies with
//! N, so window boundaries fall everywhere).
//!
//! `vcdiff_roundtrip` input: an options byte, a split byte, then source and target,
//! split at `split * len / 256`. Options: bit 0 the window size (4 KiB or 1 MiB), bit 1
//! copies from the target, bits 2-6 the effort, bit 7 the Adler-32 checksum.
//! Invariant: decode(encode(source, target)) = target.

use codec::vcdiff::{self, EncodeOptions, VcdiffDecoder};

const LIMIT: usize = 1 << 16;

pub fn vcdiff_decode(input: &[u8]) {
    let Some((&n, rest)) = input.split_first() else {
        return;
    };
    let (source, delta) = rest.split_at((usize::from(n) * 16).min(rest.len()));

    let one_shot = vcdiff::decode(source, delta, LIMIT);
    if let Ok(body) = &one_shot {
        assert!(body.len() <= LIMIT);
    }

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
}

pub fn vcdiff_roundtrip(input: &[u8]) {
    let [options, split, rest @ ..] = input else {
        return;
    };
    let (source, target) = rest.split_at((usize::from(*split) * rest.len() / 256).min(rest.len()));
    let options = EncodeOptions {
        window_size: if options & 1 == 0 { 4096 } else { 1 << 20 },
        target_copies: options & 2 == 0,
        effort: 1 + (options >> 2) % 9,
        checksum: options & 0x80 != 0,
    };
    let delta = vcdiff::encode_with(source, target, &options);
    assert_eq!(
        vcdiff::decode(source, &delta, target.len()).as_deref(),
        Ok(target),
        "decode(encode(x)) = x"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(name: &str) -> (Vec<u8>, Vec<u8>) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("seeds/vcdiff_decode")
            .join(name);
        let input = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (source, delta) = input[1..].split_at(usize::from(input[0]) * 16);
        (source.to_vec(), delta.to_vec())
    }

    /// The seeds start the fuzzer on both sides of the decoder: xdelta3's deltas (with
    /// and without a source, with its Adler-32 extension) decode, the damaged ones fail.
    #[test]
    fn xdelta3_seeds_decode_and_damaged_ones_fail() {
        for name in ["xdelta3-plain", "xdelta3-9-checksum", "no-source"] {
            let (source, delta) = seed(name);
            let body =
                vcdiff::decode(&source, &delta, LIMIT).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(body.ends_with(b"tail"), "{name}");
        }
        for name in ["truncated", "flipped-byte"] {
            let (source, delta) = seed(name);
            assert!(vcdiff::decode(&source, &delta, LIMIT).is_err(), "{name}");
        }
    }
}
