//! Shared dictionaries for `wirefold dict train`.
//!
//! RFC 9842 dictionaries are raw bytes that brotli and zstd both use as an LZ77
//! prefix, so what we want is raw content, not zstd's dictionary format (magic,
//! id, entropy tables, then content). zstd's trainer (COVER) is good at choosing
//! that content: the segments that recur across the samples, the most useful
//! last (nearest the data, cheapest to reference). It often returns less than it
//! was allowed; the room left is filled, in front, with the newest samples
//! themselves. Measured against either part alone in `docs/dictionary-codecs.md`.
//! The trainer refuses too few or too small samples (it needs about seven, as it
//! holds a quarter back to evaluate); then the newest samples are the dictionary.

use super::DictionaryError;

/// Builds a raw dictionary of at most `max_size` bytes from `samples`, oldest
/// first (e.g. the stored instances of the pages the dictionary will serve).
pub fn train(samples: &[&[u8]], max_size: usize) -> Result<Vec<u8>, DictionaryError> {
    if max_size == 0 || samples.iter().all(|s| s.is_empty()) {
        return Err(DictionaryError::Training(
            "no sample bytes, or no room for a dictionary".into(),
        ));
    }
    let trained = zstd::dict::from_samples(samples, max_size).unwrap_or_default();
    let content = if trained.is_empty() {
        &[][..]
    } else {
        &trained[zstd_header_len(&trained)?..]
    };
    let room = max_size.saturating_sub(content.len());
    let mut dictionary = Vec::with_capacity(room + content.len());
    for sample in samples.iter().rev() {
        let left = room - dictionary.len();
        if left == 0 {
            break;
        }
        dictionary.extend(sample[sample.len().saturating_sub(left)..].iter().rev());
    }
    // Built newest-first backwards: turn it around so the newest sample comes last.
    dictionary.reverse();
    dictionary.extend_from_slice(content);
    Ok(dictionary)
}

/// Where the content starts in a zstd-format dictionary.
#[allow(unsafe_code)] // zstd-sys exposes the header parser only as C
fn zstd_header_len(dictionary: &[u8]) -> Result<usize, DictionaryError> {
    // SAFETY: pointer and length describe `dictionary`, which zstd only reads.
    let len =
        unsafe { zstd_sys::ZDICT_getDictHeaderSize(dictionary.as_ptr().cast(), dictionary.len()) };
    // SAFETY: a pure function of an error code.
    if unsafe { zstd_sys::ZDICT_isError(len) } != 0 || len > dictionary.len() {
        return Err(DictionaryError::Training(
            "zstd's trainer returned a dictionary it cannot parse".into(),
        ));
    }
    Ok(len)
}
