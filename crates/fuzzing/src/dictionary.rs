//! `dictionary_decode`: RFC 9842 `dcb` and `dcz` bodies through
//! `codec::dictionary::decode`.
//!
//! Input: a flags byte, a split byte, then the rest, split into the dictionary and
//! the body at `split * len / 256`. Flags: bit 0 picks `dcb` or `dcz`; bit 1 puts a
//! valid header (magic, SHA-256 of the dictionary) before the body, so the stream
//! decoders are reached; bit 2 instead encodes the body against the dictionary and
//! requires the decode to give it back. Invariants: no panic, never more than the
//! limit, the roundtrip holds.

use codec::dictionary::{self, DictionaryCoding};

const LIMIT: usize = 1 << 16;

pub fn dictionary_decode(input: &[u8]) {
    let [flags, split, rest @ ..] = input else {
        return;
    };
    let coding = if flags & 1 == 0 {
        DictionaryCoding::Dcz
    } else {
        DictionaryCoding::Dcb
    };
    let at = (usize::from(*split) * rest.len() / 256).min(rest.len());
    let (dict, data) = rest.split_at(at);

    if flags & 4 != 0 {
        let body = dictionary::encode(coding, 1, dict, data);
        let decoded = dictionary::decode(coding, dict, &body, data.len());
        assert_eq!(decoded.as_deref(), Ok(data), "{} roundtrip", coding.token());
        return;
    }
    let body = if flags & 2 != 0 {
        let mut body = dictionary::header(coding, dict);
        body.extend_from_slice(data);
        body
    } else {
        data.to_vec()
    };
    if let Ok(decoded) = dictionary::decode(coding, dict, &body, LIMIT) {
        assert!(decoded.len() <= LIMIT, "decoded past the limit");
    }
}
