//! Shared dictionaries for `wirefold dict train`.
//!
//! RFC 9842 dictionaries are raw bytes used as an LZ77 prefix by both brotli and
//! zstd, so what we want is raw content, not zstd's dictionary format (magic,
//! id, entropy tables, then content). zstd's trainer (COVER) is good at choosing
//! that content: the segments that recur across the samples, the most useful
//! last (closest to the data, cheapest to reference). We keep its content part.
//! Measured against other choices in `docs/dictionary-codecs.md`.

use super::DictionaryError;

/// The smallest dictionary zstd's trainer accepts to produce.
const MIN_DICTIONARY: usize = 256;

/// Builds a raw dictionary of at most `max_size` bytes from `samples` (e.g. the
/// stored instances of the pages a dictionary will serve).
pub fn train(samples: &[&[u8]], max_size: usize) -> Result<Vec<u8>, DictionaryError> {
    if max_size < MIN_DICTIONARY {
        return Err(DictionaryError::Training(format!(
            "a dictionary needs at least {MIN_DICTIONARY} bytes, {max_size} asked"
        )));
    }
    let trained = zstd::dict::from_samples(samples, max_size)
        .map_err(|e| DictionaryError::Training(e.to_string()))?;
    // SAFETY: pointer and length describe `trained`, which zstd only reads.
    let header_len =
        unsafe { zstd_sys::ZDICT_getDictHeaderSize(trained.as_ptr().cast(), trained.len()) };
    // SAFETY: a plain function on an error code.
    if unsafe { zstd_sys::ZDICT_isError(header_len) } != 0 || header_len > trained.len() {
        return Err(DictionaryError::Training(
            "zstd's trainer returned a dictionary it cannot parse".into(),
        ));
    }
    Ok(trained[header_len..].to_vec())
}
