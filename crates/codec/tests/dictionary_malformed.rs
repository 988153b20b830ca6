//! Hostile dcb / dcz bodies give clear errors, never a panic or a body past the limit.

mod dictionary_support;

use dictionary_support::html_pair;
use wirefold_codec::dictionary::{decode, encode, header, DictionaryCoding, DictionaryError};

const LIMIT: usize = 64 << 20;

/// A body with what made it: (coding, body, dictionary, data).
type Case = (DictionaryCoding, Vec<u8>, Vec<u8>, Vec<u8>);

/// One case per coding; `size` caps the pages' length.
fn bodies_of(size: usize) -> Vec<Case> {
    let (mut dictionary, mut data) = html_pair();
    dictionary.truncate(size);
    data.truncate(size);
    DictionaryCoding::ALL
        .into_iter()
        .map(|c| {
            (
                c,
                encode(c, 9, &dictionary, &data),
                dictionary.clone(),
                data.clone(),
            )
        })
        .collect()
}

fn bodies() -> Vec<Case> {
    bodies_of(usize::MAX)
}

#[test]
fn wrong_magic_is_refused() {
    for (coding, body, dictionary, _) in bodies() {
        let other = match coding {
            DictionaryCoding::Dcb => DictionaryCoding::Dcz,
            DictionaryCoding::Dcz => DictionaryCoding::Dcb,
        };
        let token = other.token();
        assert_eq!(
            decode(other, &dictionary, &body, LIMIT),
            Err(DictionaryError::BadMagic { coding: token })
        );
        let mut bad = body.clone();
        bad[1] ^= 0x40;
        assert!(matches!(
            decode(coding, &dictionary, &bad, LIMIT),
            Err(DictionaryError::BadMagic { .. })
        ));
    }
}

#[test]
fn another_dictionary_is_a_hash_mismatch() {
    for (coding, body, dictionary, _) in bodies() {
        let mut other = dictionary.clone();
        other[0] ^= 1;
        let mismatch = Err(DictionaryError::HashMismatch {
            coding: coding.token(),
        });
        assert_eq!(decode(coding, &other, &body, LIMIT), mismatch);
        let mut bad_hash = body.clone();
        bad_hash[coding.header_len() - 1] ^= 1;
        assert_eq!(decode(coding, &dictionary, &bad_hash, LIMIT), mismatch);
    }
}

#[test]
fn truncation_anywhere_is_truncated() {
    for (coding, body, dictionary, _) in bodies() {
        let cuts = (0..10).map(|tenth| body.len() * tenth / 10).chain([
            1,
            5,
            coding.header_len(),
            body.len() - 1,
        ]);
        for cut in cuts {
            let result = decode(coding, &dictionary, &body[..cut], LIMIT);
            assert_eq!(
                result,
                Err(DictionaryError::Truncated {
                    coding: coding.token()
                }),
                "{coding:?} cut at {cut}"
            );
        }
    }
}

#[test]
fn trailing_bytes_are_corrupt() {
    for (coding, mut body, dictionary, _) in bodies() {
        body.extend_from_slice(b"tail");
        let result = decode(coding, &dictionary, &body, LIMIT);
        assert!(
            matches!(result, Err(DictionaryError::Corrupt { .. })),
            "{coding:?}: {result:?}"
        );
    }
}

#[test]
fn random_flips_never_panic_and_dcz_never_yields_a_wrong_body() {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // Short pages keep the 400 decodes per coding quick in a debug build.
    for (coding, body, dictionary, data) in bodies_of(20_000) {
        for _ in 0..400 {
            let mut bad = body.clone();
            for _ in 0..=(next() % 3) {
                let at = (next() % body.len() as u64) as usize;
                bad[at] ^= 1 << (next() % 8);
            }
            let result = decode(coding, &dictionary, &bad, data.len() + 1000);
            match (coding, result) {
                (_, Err(e)) => assert!(!e.to_string().is_empty()),
                // The zstd frame's checksum catches a changed stream; a flip in a bit
                // decoders ignore leaves the body intact.
                (DictionaryCoding::Dcz, Ok(out)) => {
                    assert!(out == data, "dcz decoded a wrong body")
                }
                // Brotli has no checksum: a flipped literal decodes to other bytes.
                (DictionaryCoding::Dcb, Ok(out)) => assert!(out.len() <= data.len() + 1000),
            }
        }
    }
}

#[test]
fn bombs_stop_at_the_limit() {
    let dictionary = b"0123456789abcdef".repeat(64);
    let bomb = vec![b'a'; 32 << 20];
    for coding in DictionaryCoding::ALL {
        let body = encode(coding, 5, &dictionary, &bomb);
        assert!(body.len() < 64 * 1024, "{coding:?}: {} bytes", body.len());
        let too_large = Err(DictionaryError::TooLarge { limit: 1 << 20 });
        assert_eq!(decode(coding, &dictionary, &body, 1 << 20), too_large);
        let exact = decode(coding, &dictionary, &body, bomb.len());
        assert!(
            exact.is_ok_and(|out| out == bomb),
            "{coding:?} at exactly the limit"
        );
        let one_short = Err(DictionaryError::TooLarge {
            limit: bomb.len() - 1,
        });
        assert_eq!(
            decode(coding, &dictionary, &body, bomb.len() - 1),
            one_short
        );
    }
}

#[test]
fn a_dcz_window_beyond_what_clients_accept_is_refused() {
    let dictionary = b"dictionary".to_vec();
    let mut body = header(DictionaryCoding::Dcz, &dictionary);
    // A zstd frame: no content size, a 1 GiB window (exponent 20), one empty last raw block.
    body.extend_from_slice(&[0x28, 0xb5, 0x2f, 0xfd, 0x00, 20 << 3, 0x01, 0x00, 0x00]);
    let result = decode(DictionaryCoding::Dcz, &dictionary, &body, LIMIT);
    assert!(
        matches!(result, Err(DictionaryError::Corrupt { .. })),
        "{result:?}"
    );
    // The same frame with an 8 MiB window (exponent 13) is fine.
    let at = body.len() - 4;
    body[at] = 13 << 3;
    assert_eq!(
        decode(DictionaryCoding::Dcz, &dictionary, &body, LIMIT),
        Ok(Vec::new())
    );
}
