//! VCDIFF (RFC 3284) generic differencing: a hand-written encoder and decoder.
//!
//! Output is plain RFC 3284: no secondary compression, no application header, default code
//! table, and only `VCD_SOURCE` windows (xdelta3 3.0.11 cannot decode `VCD_TARGET`). The
//! decoder accepts everything RFC 3284 allows without secondary compression, plus xdelta3's
//! application header (skipped) and per-window Adler-32 (verified).
//!
//! ```
//! use wirefold_codec::vcdiff;
//! let old = b"The quick brown fox jumps over the lazy dog.";
//! let new = b"The quick brown fox jumped over the lazy dogs.";
//! let delta = vcdiff::encode(old, new);
//! assert_eq!(vcdiff::decode(old, &delta, 1 << 20).unwrap(), new);
//! ```

mod address_cache;
mod checksum;
mod code_table;
mod decoder;
mod encoder;
mod error;
mod format;
mod instruction_writer;
mod matcher;
mod varint;

pub use decoder::{decode, VcdiffDecoder};
pub use encoder::{encode, encode_with, EncodeOptions};
pub use error::VcdiffError;
