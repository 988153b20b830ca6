//! See `fuzzing::link` for the input layout and the invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| fuzzing::link::link_frames(input));
