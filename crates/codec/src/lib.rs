//! Pure codecs, no I/O: the HTTP content codings wirefold serves, with one-shot
//! and streaming encoders and size-limited decoders.
//!
//! Later stages add dictionary framing (dcb, dcz), VCDIFF and the cost model here.

mod coding;
pub mod cost;
pub mod dictionary;
mod reuse;
pub mod vcdiff;

pub use coding::{compress, decompress, DecodeError, Decoder, Encoder};
