//! dcb / dcz bodies decode back to their input, with the exact RFC 9842 framing.

mod dictionary_support;

use dictionary_support::{c_brotli_decode, html_pair};
use wirefold_codec::dictionary::{self, encode, DictionaryCoding, DictionaryError};

const LIMIT: usize = 64 << 20;

fn assert_round_trip(
    coding: DictionaryCoding,
    level: u32,
    dictionary: &[u8],
    data: &[u8],
) -> usize {
    let body = encode(coding, level, dictionary, data);
    let decoded = dictionary::decode(coding, dictionary, &body, LIMIT)
        .unwrap_or_else(|e| panic!("{coding:?} level {level}: {e}"));
    assert!(
        decoded == data,
        "{coding:?} level {level}: round trip differs"
    );
    body.len()
}

#[test]
fn tokens_and_header_lengths() {
    assert_eq!(DictionaryCoding::Dcb.token(), "dcb");
    assert_eq!(DictionaryCoding::Dcz.token(), "dcz");
    assert_eq!(
        DictionaryCoding::from_token(" DCZ "),
        Some(DictionaryCoding::Dcz)
    );
    assert_eq!(
        DictionaryCoding::from_token("dcb"),
        Some(DictionaryCoding::Dcb)
    );
    assert_eq!(DictionaryCoding::from_token("br"), None);
    assert_eq!(DictionaryCoding::Dcb.header_len(), 36);
    assert_eq!(DictionaryCoding::Dcz.header_len(), 40);
}

#[test]
fn header_is_magic_then_sha256_of_the_dictionary() {
    let (dictionary, data) = html_pair();
    let hash = dictionary::sha256(&dictionary);
    let dcb = encode(DictionaryCoding::Dcb, 5, &dictionary, &data);
    assert_eq!(dcb[..4], [0xff, 0x44, 0x43, 0x42]);
    assert_eq!(dcb[4..36], hash);
    let dcz = encode(DictionaryCoding::Dcz, 3, &dictionary, &data);
    assert_eq!(dcz[..8], [0x5e, 0x2a, 0x4d, 0x18, 0x20, 0, 0, 0]);
    assert_eq!(dcz[8..40], hash);
}

#[test]
fn every_level_round_trips_and_the_dictionary_pays() {
    let (dictionary, data) = html_pair();
    let plain = wirefold_codec::compress(wirefold_http::ContentCoding::Br, 11, &data).len();
    for coding in DictionaryCoding::ALL {
        for level in coding.levels().step_by(3) {
            let size = assert_round_trip(coding, level, &dictionary, &data);
            if level >= 3 {
                assert!(
                    size * 10 < plain,
                    "{coding:?} {level}: {size} against br-11 {plain}"
                );
            }
        }
    }
}

#[test]
fn dcb_decodes_with_ours_and_with_googles_decoder() {
    let (dictionary, data) = html_pair();
    for quality in [0, 5, 7, 9, 11] {
        let body = encode(DictionaryCoding::Dcb, quality, &dictionary, &data);
        let ours = dictionary::decode(DictionaryCoding::Dcb, &dictionary, &body, LIMIT);
        assert_eq!(ours.as_deref(), Ok(&data[..]), "q{quality}, our decoder");
        let theirs = c_brotli_decode(&dictionary, &body[36..]);
        assert!(
            theirs.as_deref() == Some(&data[..]),
            "q{quality}, C decoder"
        );
        // Quality 0 is raised to 5, the lowest at which C brotli uses a dictionary.
        assert!(body.len() < 200, "q{quality}: {} bytes", body.len());
    }
}

#[test]
fn edge_sizes_round_trip() {
    let (page, _) = html_pair();
    let cases: [(&[u8], &[u8]); 5] = [
        (b"", b""),
        (b"", &page[..5000]),
        (&page, b""),
        (b"x", b"x"),
        (&page[..100], &page),
    ];
    for coding in DictionaryCoding::ALL {
        for (dictionary, data) in cases {
            assert_round_trip(coding, 9, dictionary, data);
        }
    }
}

#[test]
fn a_dictionary_that_looks_like_a_zstd_dictionary_is_still_raw() {
    // The zstd dictionary magic, then text: must not be parsed as a zstd dictionary.
    let (page, data) = html_pair();
    let mut dictionary = vec![0x37, 0xa4, 0x30, 0xec, 1, 0, 0, 0];
    dictionary.extend_from_slice(&page);
    for coding in DictionaryCoding::ALL {
        assert_round_trip(coding, 9, &dictionary, &data);
    }
}

/// A dictionary larger than brotli's biggest window (16 MiB), with the data's
/// content at its very start: only an encoder that reaches the whole dictionary
/// finds it (the pure-Rust one cannot: its window holds the last 16 MiB).
#[test]
fn dcb_reaches_past_the_window_and_dcz_decodes_within_its_limit() {
    let (page, data) = html_pair();
    let mut dictionary = data.clone();
    let mut filler = 0x9e37_79b9_7f4a_7c15_u64;
    dictionary.extend((0..(17 << 20)).map(|_| {
        filler ^= filler << 13;
        filler ^= filler >> 7;
        filler ^= filler << 17;
        filler as u8
    }));
    dictionary.extend_from_slice(&page[..1000]);
    let c = encode(DictionaryCoding::Dcb, 5, &dictionary, &data);
    assert_eq!(
        c_brotli_decode(&dictionary, &c[36..]).as_deref(),
        Some(&data[..])
    );
    assert_eq!(
        dictionary::decode(DictionaryCoding::Dcb, &dictionary, &c, LIMIT).as_deref(),
        Ok(&data[..])
    );
    assert!(c.len() < data.len() / 100, "dcb {} bytes", c.len());
    // dcz may use a window of 1.25 × 18 MiB, so 2^24: the start of the dictionary
    // (18 MiB back) is out of reach, but the result must still decode.
    assert_round_trip(DictionaryCoding::Dcz, 3, &dictionary, &data);
}

/// The dcz frame's window (RFC 8878 §3.1.1.1.2), from the frame after the 40-byte header.
fn dcz_window(body: &[u8]) -> u64 {
    let frame = &body[40..];
    assert_eq!(frame[..4], [0x28, 0xb5, 0x2f, 0xfd], "zstd frame magic");
    let descriptor = frame[4];
    let single_segment = descriptor & 0x20 != 0;
    let dictionary_id_bytes = [0, 1, 2, 4][usize::from(descriptor & 3)];
    assert_eq!(dictionary_id_bytes, 0, "frames carry no dictionary id");
    if single_segment {
        // The window is the content size, stored after the descriptor.
        let size_bytes = [1, 2, 4, 8][usize::from(descriptor >> 6)];
        let mut size = [0u8; 8];
        size[..size_bytes].copy_from_slice(&frame[5..5 + size_bytes]);
        u64::from_le_bytes(size) + if size_bytes == 2 { 256 } else { 0 }
    } else {
        let exponent = u64::from(frame[5] >> 3);
        let mantissa = u64::from(frame[5] & 7);
        let base = 1u64 << (10 + exponent);
        base + base / 8 * mantissa
    }
}

#[test]
fn dcz_window_stays_within_what_clients_accept() {
    let (dictionary, data) = html_pair();
    let body = encode(DictionaryCoding::Dcz, 19, &dictionary, &data);
    assert!(dcz_window(&body) <= 8 << 20);
    // Data bigger than the 8 MiB every client accepts with a small dictionary:
    // the window must stop at 8 MiB rather than grow to the data.
    let big: Vec<u8> = data.iter().cycle().take(9 << 20).copied().collect();
    let body = encode(DictionaryCoding::Dcz, 1, &dictionary, &big);
    assert_eq!(dcz_window(&body), 8 << 20);
    assert_eq!(
        dictionary::decode(DictionaryCoding::Dcz, &dictionary, &body, LIMIT).map(|d| d == big),
        Ok(true)
    );
}

#[test]
fn training_makes_a_raw_dictionary_that_saves_on_unseen_pages() {
    // The eleven smallest pages of one site (same template): ten to train, one to test.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus/siblings/httpwg__httpwg.github.io");
    let mut pages: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .expect("siblings directory")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "html"))
        .map(|path| std::fs::read(path).expect("page"))
        .collect();
    pages.sort_by_key(Vec::len);
    let samples: Vec<&[u8]> = pages[..10].iter().map(Vec::as_slice).collect();
    let unseen = &pages[10];

    let trained = dictionary::train(&samples, 16 * 1024).expect("training");
    assert!(
        trained.len() <= 16 * 1024 && trained.len() > 1024,
        "{} bytes",
        trained.len()
    );
    assert_ne!(
        trained[..4],
        [0x37, 0xa4, 0x30, 0xec],
        "raw content, not zstd's format"
    );
    let without = encode(DictionaryCoding::Dcz, 19, b"", unseen).len();
    let with = assert_round_trip(DictionaryCoding::Dcz, 19, &trained, unseen);
    assert!(
        with < without * 9 / 10,
        "{with} with the dictionary, {without} without"
    );

    // Too few samples for zstd's trainer: the newest samples become the dictionary.
    let newest: Vec<u8> = samples[8..].concat();
    let fallback = dictionary::train(&samples[8..], 16 * 1024).expect("training on two samples");
    assert_eq!(fallback, newest[newest.len().saturating_sub(16 * 1024)..]);
    assert!(matches!(
        dictionary::train(&[], 16 * 1024),
        Err(DictionaryError::Training(_))
    ));
    assert!(matches!(
        dictionary::train(&samples, 0),
        Err(DictionaryError::Training(_))
    ));
}
