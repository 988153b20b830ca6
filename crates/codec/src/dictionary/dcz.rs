//! dcz: one zstd frame using the dictionary as a raw-content prefix (`refPrefix`,
//! so a dictionary that happens to start with the zstd dictionary magic is never
//! parsed as one).

use std::io::Write;

use zstd::stream::raw::{DParameter, Decoder, InBuffer, Operation, OutBuffer};

use super::{DictionaryError, LimitedOutput};

const CODING: &str = "dcz";
/// The smallest window zstd can express.
const MIN_WINDOW_LOG: u32 = 10;
/// RFC 9842: no client needs to accept a window over 128 MiB.
const MAX_WINDOW_LOG: u32 = 27;
/// RFC 9842: every client accepts a window of max(8 MiB, 1.25 × dictionary).
const ALWAYS_ACCEPTED_WINDOW: usize = 8 << 20;

/// The largest window every dcz client must accept with this dictionary.
fn accepted_window(dictionary_len: usize) -> usize {
    ALWAYS_ACCEPTED_WINDOW
        .max(dictionary_len.saturating_add(dictionary_len / 4))
        .min(1 << MAX_WINDOW_LOG)
}

/// The encoder's window: big enough that the end of the data still reaches the
/// start of the dictionary (a match may reach back over dictionary + data), so
/// ceil(log2(dictionary + data)) within zstd's 2^10..2^27, but never more than
/// every client accepts, floor(log2(max(8 MiB, 1.25 × dictionary))). Past that
/// the oldest dictionary bytes fall out of reach as the data grows. (zstd itself
/// lowers it further when dictionary + data is small.)
pub(super) fn window_log(dictionary_len: usize, data_len: usize) -> u32 {
    let wanted =
        ceil_log2(dictionary_len.saturating_add(data_len)).clamp(MIN_WINDOW_LOG, MAX_WINDOW_LOG);
    wanted.min(accepted_window(dictionary_len).ilog2())
}

/// The decoder accepts what RFC 9842 obliges a client to accept, and no more:
/// it bounds the decoder's memory whatever a hostile frame declares.
fn max_window_log(dictionary_len: usize) -> u32 {
    ceil_log2(accepted_window(dictionary_len))
}

fn ceil_log2(n: usize) -> u32 {
    usize::BITS - n.saturating_sub(1).leading_zeros()
}

/// Appends one frame with the content size (decoders can size their output and
/// refuse early) and a checksum (4 bytes that turn a corrupted stream into an
/// error instead of a wrong body).
#[allow(
    clippy::expect_used,
    reason = "zstd fails here only to allocate (Rust's own allocations abort on that): the \
              parameters are within its bounds, the output is a `Vec` and exactly the \
              pledged size is written"
)]
pub(super) fn encode(level: u32, dictionary: &[u8], data: &[u8], out: &mut Vec<u8>) {
    let mut encoder = zstd::stream::write::Encoder::with_ref_prefix(out, level as i32, dictionary)
        .expect("zstd context allocation");
    encoder
        .window_log(window_log(dictionary.len(), data.len()))
        .and_then(|()| encoder.include_checksum(true))
        .and_then(|()| encoder.include_contentsize(true))
        .and_then(|()| encoder.set_pledged_src_size(Some(data.len() as u64)))
        .expect("valid zstd parameters");
    encoder.write_all(data).expect("in-memory zstd write");
    encoder.finish().expect("in-memory zstd finish");
}

/// Decodes exactly one frame (the prefix only applies to one frame) and nothing after it.
pub(super) fn decode(
    dictionary: &[u8],
    stream: &[u8],
    limit: usize,
) -> Result<Vec<u8>, DictionaryError> {
    let corrupt = |e: std::io::Error| DictionaryError::Corrupt {
        coding: CODING,
        detail: e.to_string(),
    };
    let mut decoder = Decoder::with_ref_prefix(dictionary).map_err(corrupt)?;
    decoder
        .set_parameter(DParameter::WindowLogMax(max_window_log(dictionary.len())))
        .map_err(corrupt)?;
    let mut input = InBuffer::around(stream);
    let mut output = LimitedOutput::new(limit);
    loop {
        let consumed_before = input.pos();
        let mut step = OutBuffer::around(output.room());
        // 0: the frame is complete and fully flushed.
        let hint = decoder.run(&mut input, &mut step).map_err(corrupt)?;
        let written = step.pos();
        output.commit(written)?;
        let input_left = stream.len() - input.pos();
        if hint == 0 {
            return match input_left {
                0 => Ok(output.bytes),
                n => Err(DictionaryError::Corrupt {
                    coding: CODING,
                    detail: format!("{n} bytes after the end of the frame"),
                }),
            };
        }
        if written == 0 && input.pos() == consumed_before {
            return Err(match input_left {
                0 => DictionaryError::Truncated { coding: CODING },
                // zstd either advances or rejects; a guard against looping.
                n => DictionaryError::Corrupt {
                    coding: CODING,
                    detail: format!("decoder stopped with {n} bytes of input left"),
                },
            });
        }
    }
}
