//! See `fuzzing::http_fields` for the input layout and the invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| fuzzing::http_fields::http_fields(input));
