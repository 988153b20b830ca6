//! See `fuzzing::vcdiff` for the input layout and the invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| fuzzing::vcdiff::vcdiff_roundtrip(input));
