//! dcb: one brotli stream using the dictionary as a raw LZ77 prefix (a compound
//! dictionary in the terms of the Shared Brotli draft, §9.2).

use super::{c_brotli, DictionaryError, LimitedOutput};

const CODING: &str = "dcb";
/// RFC 9842: dcb windows are at most 16 MiB.
const MAX_LGWIN: u32 = 24;
/// Below this the encoder switches to hashers with a costly setup (see `coding.rs`).
const MIN_LGWIN: u32 = 17;
/// Brotli keeps 16 bytes of the window for itself.
const WINDOW_OVERHEAD: usize = 16;

/// The smallest window in MIN_LGWIN..=MAX_LGWIN that holds `len` bytes.
fn lgwin_for(len: usize) -> u32 {
    let mut lgwin = MIN_LGWIN;
    while lgwin < MAX_LGWIN && (1usize << lgwin) - WINDOW_OVERHEAD < len {
        lgwin += 1;
    }
    lgwin
}

/// Appends a stream made by Google's C brotli, which reaches the whole dictionary
/// whatever the window, so the window is sized to the data alone. (The pure-Rust
/// port was measured too and is not used: `docs/dictionary-codecs.md`.)
#[allow(
    clippy::expect_used,
    reason = "the C encoder fails only when malloc does (Rust's own allocations abort on \
              that); the quality is clamped and the window is within brotli's bounds"
)]
pub(super) fn encode(quality: u32, dictionary: &[u8], data: &[u8], out: &mut Vec<u8>) {
    c_brotli::compress(quality, lgwin_for(data.len()), dictionary, data, out)
        .expect("C brotli encoder allocation");
}

type DecoderState = brotli::BrotliState<
    brotli::enc::StandardAlloc,
    brotli::enc::StandardAlloc,
    brotli::enc::StandardAlloc,
>;

/// Decodes one brotli stream (RFC 7932 windows only, no large window) and nothing
/// after it, with the pure-Rust decoder: memory-safe on hostile input, and an
/// implementation independent of the encoder.
pub(super) fn decode(
    dictionary: &[u8],
    stream: &[u8],
    limit: usize,
) -> Result<Vec<u8>, DictionaryError> {
    let mut state = Box::new(DecoderState::new(
        brotli::enc::StandardAlloc::default(),
        brotli::enc::StandardAlloc::default(),
        brotli::enc::StandardAlloc::default(),
    ));
    if !dictionary.is_empty() && !state.attach_dictionary(dictionary.to_vec().into()) {
        return Err(DictionaryError::Corrupt {
            coding: CODING,
            detail: "the decoder refused the dictionary".into(),
        });
    }
    let mut output = LimitedOutput::new(limit);
    let (mut available_in, mut consumed, mut total_out) = (stream.len(), 0, 0);
    loop {
        let consumed_before = consumed;
        let room = output.room();
        let (mut available_out, mut written) = (room.len(), 0);
        let result = brotli::BrotliDecompressStream(
            &mut available_in,
            &mut consumed,
            stream,
            &mut available_out,
            &mut written,
            room,
            &mut total_out,
            &mut state,
        );
        output.commit(written)?;
        match result {
            brotli::BrotliResult::ResultSuccess => {
                return match available_in {
                    0 => Ok(output.bytes),
                    n => Err(DictionaryError::Corrupt {
                        coding: CODING,
                        detail: format!("{n} bytes after the end of the stream"),
                    }),
                };
            }
            brotli::BrotliResult::ResultFailure => {
                return Err(DictionaryError::Corrupt {
                    coding: CODING,
                    detail: format!("{:?}", state.error_code),
                })
            }
            brotli::BrotliResult::NeedsMoreInput if available_in == 0 => {
                return Err(DictionaryError::Truncated { coding: CODING })
            }
            brotli::BrotliResult::NeedsMoreInput | brotli::BrotliResult::NeedsMoreOutput => {
                if written == 0 && consumed == consumed_before {
                    return Err(DictionaryError::Corrupt {
                        coding: CODING,
                        detail: "the decoder stopped making progress".into(),
                    });
                }
            }
        }
    }
}
