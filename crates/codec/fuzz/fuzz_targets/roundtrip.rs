//! Encoder correctness: whatever the input and options, decode(encode(x)) == x.
//! Input layout: one options byte, one split byte, then source and target.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirefold_codec::vcdiff::{self, EncodeOptions};

fuzz_target!(|input: &[u8]| {
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
        vcdiff::decode(source, &delta, target.len()).unwrap(),
        target
    );
});
