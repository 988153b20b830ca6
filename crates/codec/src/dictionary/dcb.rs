//! dcb: one brotli stream using the dictionary as a raw LZ77 prefix (a compound
//! dictionary in the terms of the Shared Brotli draft, §9.2).

use super::{c_brotli, header, DictionaryCoding, DictionaryError, LimitedOutput};

const CODING: &str = "dcb";
/// RFC 9842: dcb windows are at most 16 MiB.
const MAX_LGWIN: u32 = 24;
/// Below this the encoders switch to hashers with a costly setup (see `coding.rs`).
const MIN_LGWIN: u32 = 17;
/// Brotli keeps 16 bytes of the window for itself.
const WINDOW_OVERHEAD: usize = 16;

/// The brotli implementation that produces a dcb stream. Both make valid dcb; they
/// differ in how far back they see (see `docs/dictionary-codecs.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DcbEncoder {
    /// The pure-Rust port: the dictionary pre-fills its ring buffer, so only the
    /// last 2^lgwin − 16 bytes of dictionary + data are ever in reach.
    Rust,
    /// Google's C brotli: the dictionary stays in reach whatever the window.
    C,
}

impl DcbEncoder {
    /// The encoder [`super::encode`] uses for a dictionary and body of these sizes.
    pub fn for_sizes(dictionary_len: usize, data_len: usize) -> Self {
        let _ = (dictionary_len, data_len);
        DcbEncoder::C
    }
}

/// A whole dcb body made by `encoder`, for comparing the two; [`super::encode`]
/// picks one by [`DcbEncoder::for_sizes`].
pub fn encode_dcb_with(
    encoder: DcbEncoder,
    level: u32,
    dictionary: &[u8],
    data: &[u8],
) -> Vec<u8> {
    let mut body = header(DictionaryCoding::Dcb, dictionary);
    encode(encoder, level.min(11), dictionary, data, &mut body);
    body
}

/// The smallest window in MIN_LGWIN..=MAX_LGWIN that holds `len` bytes.
fn lgwin_for(len: usize) -> u32 {
    let mut lgwin = MIN_LGWIN;
    while lgwin < MAX_LGWIN && (1usize << lgwin) - WINDOW_OVERHEAD < len {
        lgwin += 1;
    }
    lgwin
}

pub(super) fn encode(
    encoder: DcbEncoder,
    quality: u32,
    dictionary: &[u8],
    data: &[u8],
    out: &mut Vec<u8>,
) {
    match encoder {
        // The window must span dictionary + data for the dictionary to stay in reach.
        DcbEncoder::Rust => encode_rust(
            quality,
            lgwin_for(dictionary.len().saturating_add(data.len())),
            dictionary,
            data,
            out,
        ),
        // The dictionary lies outside the window: size the window to the data alone.
        DcbEncoder::C => {
            c_brotli::compress(quality, lgwin_for(data.len()), dictionary, data, out)
                .expect("C brotli encoder allocation");
        }
    }
}

fn encode_rust(quality: u32, lgwin: u32, dictionary: &[u8], data: &[u8], out: &mut Vec<u8>) {
    use brotli::enc::encode::{BrotliEncoderOperation, BrotliEncoderParameter};
    let mut state = brotli::enc::encode::BrotliEncoderStateStruct::new(
        brotli::enc::StandardAlloc::default(),
    );
    let size_hint = u32::try_from(data.len()).unwrap_or(u32::MAX);
    for (parameter, value) in [
        (BrotliEncoderParameter::BROTLI_PARAM_QUALITY, quality),
        (BrotliEncoderParameter::BROTLI_PARAM_LGWIN, lgwin),
        (BrotliEncoderParameter::BROTLI_PARAM_SIZE_HINT, size_hint),
    ] {
        assert!(state.set_parameter(parameter, value), "brotli parameter");
    }
    if !dictionary.is_empty() {
        state.set_custom_dictionary(dictionary.len(), dictionary);
    }
    let mut chunk = vec![0u8; 64 * 1024];
    let (mut available_in, mut in_offset) = (data.len(), 0);
    loop {
        let (mut available_out, mut out_offset) = (chunk.len(), 0);
        let ok = state.compress_stream(
            BrotliEncoderOperation::BROTLI_OPERATION_FINISH,
            &mut available_in,
            data,
            &mut in_offset,
            &mut available_out,
            &mut chunk,
            &mut out_offset,
            &mut None,
            &mut |_, _, _, _| (),
        );
        assert!(ok, "in-memory brotli encoding");
        out.extend_from_slice(&chunk[..out_offset]);
        if state.is_finished() {
            return;
        }
    }
}

type DecoderState = brotli::BrotliState<
    brotli::enc::StandardAlloc,
    brotli::enc::StandardAlloc,
    brotli::enc::StandardAlloc,
>;

/// Decodes one brotli stream (RFC 7932 windows only, no large window) and nothing after it.
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
