//! The bodies of wirefold's fuzz targets, one plain function per target, each taking
//! arbitrary bytes and panicking only when a parser breaks a promise (or panics itself).
//!
//! They live in a workspace member, not in the fuzz crate, so that the same code runs in
//! two places: `fuzz/` (a standalone cargo-fuzz crate: nightly, libFuzzer, sanitizers,
//! none of which may enter the main build or its lock file) calls them from its
//! `fuzz_target!`s, and `tests/seeds.rs` replays the committed seed corpus in `seeds/`
//! through them as part of `cargo test --workspace`. See `docs/fuzzing.md`.

pub mod dictionary;
pub mod http_fields;
pub mod link;
pub mod trace;
pub mod vcdiff;

/// A target's body: arbitrary bytes in, a panic when a promise breaks.
pub type Target = fn(&[u8]);

/// Every target: its name (the directory under `seeds/`, the binary under `fuzz/`) and body.
pub const TARGETS: &[(&str, Target)] = &[
    ("link_frames", link::link_frames),
    ("http_fields", http_fields::http_fields),
    ("dictionary_decode", dictionary::dictionary_decode),
    ("trace", trace::trace),
    ("vcdiff_decode", vcdiff::vcdiff_decode),
    ("vcdiff_roundtrip", vcdiff::vcdiff_roundtrip),
];
