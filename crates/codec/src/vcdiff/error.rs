//! Why a delta could not be decoded.

/// A VCDIFF delta that is malformed, unsupported, or does not fit the caller's limit.
///
/// The decoder never returns a partial or unverified body as success: every inconsistency it
/// can detect is one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VcdiffError {
    #[error("not a VCDIFF delta: bad magic bytes (expected D6 C3 C4)")]
    BadMagic,
    #[error("unsupported VCDIFF version {0:#04x} (only RFC 3284 version 0 is supported)")]
    UnsupportedVersion(u8),
    #[error(
        "unsupported secondary compressor id {0} (VCD_DECOMPRESS); encode with `xdelta3 -S none`"
    )]
    UnsupportedSecondaryCompressor(u8),
    #[error("application-defined code tables (VCD_CODETABLE) are not supported")]
    UnsupportedCodeTable,
    #[error("unknown bits {0:#04x} in the header indicator")]
    UnsupportedHeaderFlags(u8),
    #[error("unknown bits {0:#04x} in a window indicator")]
    UnsupportedWindowFlags(u8),
    #[error("window indicator {0:#04x} sets both VCD_SOURCE and VCD_TARGET")]
    ConflictingWindowFlags(u8),
    #[error("compressed sections (delta indicator {0:#04x}) need a secondary compressor, which is not supported")]
    UnsupportedCompressedSections(u8),
    #[error("delta is truncated: it ends inside the {what}")]
    Truncated { what: &'static str },
    #[error("instructions read past the end of the {section}")]
    SectionOverrun { section: &'static str },
    #[error("malformed integer in the {what}")]
    BadInteger { what: &'static str },
    #[error("{what} is implausibly large ({len} bytes)")]
    OversizedField { what: &'static str, len: u64 },
    #[error(
        "window segment {position}+{length} lies outside the {available} bytes of its {origin}"
    )]
    SegmentOutOfRange {
        origin: &'static str,
        position: u64,
        length: u64,
        available: u64,
    },
    #[error("COPY address {address} out of range (only {here} bytes precede it)")]
    AddressOutOfRange { address: u64, here: u64 },
    #[error("bad instruction: {0}")]
    BadInstruction(&'static str),
    #[error("size mismatch in the {what}: declared {declared}, actual {actual}")]
    SizeMismatch {
        what: &'static str,
        declared: u64,
        actual: u64,
    },
    #[error(
        "Adler-32 mismatch in window {window}: delta says {expected:08x}, decoded {actual:08x}"
    )]
    ChecksumMismatch {
        window: u64,
        expected: u32,
        actual: u32,
    },
    #[error("decoded output would exceed the limit of {limit} bytes")]
    LimitExceeded { limit: usize },
    #[error("decoder already failed; it cannot accept more input")]
    Poisoned,
}
