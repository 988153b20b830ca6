//! VCDIFF round trips, the streaming decoder, hand-built deltas for features our encoder
//! never emits (VCD_TARGET, copies spanning source and target), and hostile input: every
//! truncation, random corruption and huge declared sizes give an error, never a panic, an
//! allocation beyond the limit, or a wrong body returned as success.

use proptest::prelude::*;
use wirefold_codec::vcdiff::{self, EncodeOptions, VcdiffDecoder, VcdiffError};

const HEADER: [u8; 5] = [0xD6, 0xC3, 0xC4, 0x00, 0x00];

fn stream_decode(
    source: &[u8],
    delta: &[u8],
    limit: usize,
    chunk: usize,
) -> Result<Vec<u8>, VcdiffError> {
    let mut decoder = VcdiffDecoder::new(source, limit);
    let mut out = Vec::new();
    for piece in delta.chunks(chunk.max(1)) {
        out.extend(decoder.write(piece)?);
    }
    decoder.finish()?;
    Ok(out)
}

/// A target built from slices of the source, fresh bytes and runs, as edits produce.
fn edited(source: &[u8], edits: &[(usize, usize, Vec<u8>, u8)]) -> Vec<u8> {
    let mut target = Vec::new();
    for (start, len, fresh, run) in edits {
        if !source.is_empty() {
            let start = start % source.len();
            target.extend_from_slice(&source[start..(start + len).min(source.len())]);
        }
        target.extend_from_slice(fresh);
        target.extend(std::iter::repeat_n(b'a' + run % 3, usize::from(*run)));
    }
    target
}

fn options() -> impl Strategy<Value = EncodeOptions> {
    (
        prop_oneof![Just(4096usize), Just(1 << 20)],
        any::<bool>(),
        1u8..=9,
        any::<bool>(),
    )
        .prop_map(
            |(window_size, target_copies, effort, checksum)| EncodeOptions {
                window_size,
                target_copies,
                effort,
                checksum,
            },
        )
}

fn source_and_target() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let source = prop::collection::vec(prop_oneof![3 => b'a'..=b'e', 1 => any::<u8>()], 0..12_000);
    let edits = prop::collection::vec(
        (
            any::<usize>(),
            0usize..3000,
            prop::collection::vec(any::<u8>(), 0..40),
            any::<u8>(),
        ),
        0..12,
    );
    (source, edits).prop_map(|(source, edits)| {
        let target = edited(&source, &edits);
        (source, target)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn round_trips_one_shot_and_streaming((source, target) in source_and_target(), options in options(), chunk in 1usize..5000) {
        let delta = vcdiff::encode_with(&source, &target, &options);
        prop_assert_eq!(vcdiff::decode(&source, &delta, target.len()).unwrap(), target.clone());
        prop_assert_eq!(stream_decode(&source, &delta, target.len(), chunk).unwrap(), target);
    }

    /// Corruption of a checksummed delta is always caught; of a plain one, it may yield a
    /// different body (RFC 3284 has no integrity check) but never a panic or excess output.
    #[test]
    fn corrupted_deltas_fail_cleanly(
        (source, target) in source_and_target(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        checksum in any::<bool>(),
    ) {
        let options = EncodeOptions { window_size: 4096, checksum, ..EncodeOptions::default() };
        let mut delta = vcdiff::encode_with(&source, &target, &options);
        for (index, mask) in &flips {
            let at = index.index(delta.len());
            delta[at] ^= mask;
        }
        let limit = target.len() + 100;
        match vcdiff::decode(&source, &delta, limit) {
            Ok(body) => {
                prop_assert!(body.len() <= limit);
                if checksum {
                    // A flip may land in a window header and still decode the same body
                    // (e.g. a segment length the window never reads beyond).
                    prop_assert_eq!(body, target);
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        let _ = stream_decode(&source, &delta, limit, 333);
    }

    #[test]
    fn arbitrary_bytes_never_panic(source in prop::collection::vec(any::<u8>(), 0..200), tail in prop::collection::vec(any::<u8>(), 0..300)) {
        let delta = [&HEADER[..], &tail].concat();
        if let Ok(body) = vcdiff::decode(&source, &delta, 10_000) {
            prop_assert!(body.len() <= 10_000);
        }
        let _ = stream_decode(&source, &delta, 10_000, 7);
    }
}

/// Every proper prefix of a delta fails, except a cut exactly between windows: VCDIFF has no
/// end marker, so that is indistinguishable from a shorter target, and the body is then an
/// exact prefix of the target (the caller's hash of the whole body catches it).
#[test]
fn every_truncation_fails_or_stops_at_a_window_boundary() {
    let source: Vec<u8> = (0..30_000u32)
        .flat_map(|i| format!("{i},").into_bytes())
        .collect();
    let target = edited(
        &source,
        &[
            (100, 9000, b"new text".to_vec(), 20),
            (50_000, 20_000, b"more".to_vec(), 9),
        ],
    );
    for (windows, options) in [
        ("one window", EncodeOptions::default()),
        (
            "many windows",
            EncodeOptions {
                window_size: 4096,
                ..EncodeOptions::default()
            },
        ),
    ] {
        let delta = vcdiff::encode(&source, &target);
        let delta = if windows == "one window" {
            delta
        } else {
            vcdiff::encode_with(&source, &target, &options)
        };
        let mut boundaries = 0;
        for cut in 0..delta.len() {
            match vcdiff::decode(&source, &delta[..cut], usize::MAX) {
                Err(VcdiffError::Truncated { .. }) => {}
                Err(e) => panic!("{windows}: cut at {cut} gave {e}, not Truncated"),
                Ok(body) => {
                    assert!(
                        windows == "many windows" && cut > HEADER.len(),
                        "{windows}: cut at {cut} decoded"
                    );
                    assert!(
                        body.len() % 4096 == 0 && target.starts_with(&body),
                        "{windows}: cut at {cut}: not a window prefix"
                    );
                    boundaries += 1;
                }
            }
            let streamed = stream_decode(&source, &delta[..cut], usize::MAX, 1000);
            assert!(
                streamed.is_err() || (windows == "many windows" && cut > HEADER.len()),
                "{windows}: streaming cut at {cut}"
            );
        }
        if windows == "many windows" {
            assert_eq!(boundaries, target.len().div_ceil(4096) - 1);
        }
    }
}

/// A window with `body` as its delta encoding and the given indicator and segment.
fn window(indicator: u8, segment: &[u8], body: &[u8]) -> Vec<u8> {
    let mut w = vec![indicator];
    w.extend_from_slice(segment);
    assert!(body.len() < 128);
    w.push(body.len() as u8);
    w.extend_from_slice(body);
    w
}

#[test]
fn decodes_target_segments_and_copies_spanning_source_and_target() {
    // Window 1: ADD "abcdefgh" (opcode 9 = ADD size 8).
    let w1 = window(
        0x00,
        &[],
        &[
            8, 0, 8, 1, 0, b'a', b'b', b'c', b'd', b'e', b'f', b'g', b'h', 9,
        ],
    );
    // Window 2: VCD_TARGET segment of 8 bytes at 0; COPY 8 from 0 (opcode 24 = COPY size 8
    // mode SELF), then COPY 6 from U address 4, which spans the segment's last four bytes
    // and the window's first two (opcode 22 = COPY size 6 mode SELF).
    let w2 = window(0x02, &[8, 0], &[14, 0, 0, 2, 2, 24, 22, 0, 4]);
    let delta = [&HEADER[..], &w1, &w2].concat();
    let expected = b"abcdefghabcdefghefghab";
    assert_eq!(vcdiff::decode(b"", &delta, 100).unwrap(), expected);
    assert_eq!(stream_decode(b"", &delta, 100, 3).unwrap(), expected);
    // A VCD_TARGET segment reaching past the output so far is rejected.
    let w2_bad = window(0x02, &[9, 0], &[14, 0, 0, 2, 2, 24, 22, 0, 4]);
    let err = vcdiff::decode(b"", &[&HEADER[..], &w1, &w2_bad].concat(), 100).unwrap_err();
    assert!(
        matches!(err, VcdiffError::SegmentOutOfRange { .. }),
        "{err}"
    );
}

#[test]
fn run_and_overlapping_self_copy() {
    // RUN 5 of 'z' (opcode 0, explicit size), then COPY 7 at HERE-2 (mode 1, size 7: opcode
    // 19 + 16 + 4 = 39), overlapping its own output.
    let w = window(0x00, &[], &[12, 0, 1, 3, 1, b'z', 0, 5, 39, 2]);
    let delta = [&HEADER[..], &w].concat();
    assert_eq!(vcdiff::decode(b"", &delta, 100).unwrap(), b"zzzzzzzzzzzz");
}

#[test]
fn header_errors_name_the_problem() {
    let cases: [(&[u8], VcdiffError); 6] = [
        (b"PK\x03\x04", VcdiffError::BadMagic),
        (
            &[0xD6, 0xC3, 0xC4, 0x53, 0x00],
            VcdiffError::UnsupportedVersion(0x53),
        ),
        (
            &[0xD6, 0xC3, 0xC4, 0x00, 0x01, 0x02],
            VcdiffError::UnsupportedSecondaryCompressor(2),
        ),
        (
            &[0xD6, 0xC3, 0xC4, 0x00, 0x02, 0x05],
            VcdiffError::UnsupportedCodeTable,
        ),
        (
            &[0xD6, 0xC3, 0xC4, 0x00, 0x18],
            VcdiffError::UnsupportedHeaderFlags(0x18),
        ),
        (
            &[0xD6, 0xC3, 0xC4, 0x00, 0x00, 0x03, 0, 0, 3],
            VcdiffError::ConflictingWindowFlags(0x03),
        ),
    ];
    for (delta, expected) in cases {
        assert_eq!(vcdiff::decode(b"", delta, 100).unwrap_err(), expected);
        let mut decoder = VcdiffDecoder::new(b"", 100);
        assert_eq!(decoder.write(delta).unwrap_err(), expected);
        assert_eq!(decoder.write(b"").unwrap_err(), VcdiffError::Poisoned);
    }
    assert!(matches!(
        vcdiff::decode(b"", &HEADER[..3], 100),
        Err(VcdiffError::Truncated { .. })
    ));
    assert!(
        VcdiffDecoder::new(b"", 100).finish().is_err(),
        "an empty delta has no header"
    );
}

#[test]
fn huge_declared_sizes_fail_before_allocating() {
    let huge = [0x8F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]; // about 2^62
                                                                       // Target window length 2^62.
    let w = [&[0x00, 0x20][..], &huge, &[0, 0, 0, 0]].concat();
    let err = vcdiff::decode(b"", &[&HEADER[..], &w].concat(), 1 << 20).unwrap_err();
    assert_eq!(err, VcdiffError::LimitExceeded { limit: 1 << 20 });
    // Delta encoding length 2^62 for a tiny window: refused without waiting for the bytes.
    let w = [&[0x00][..], &huge, &[4, 0, 0, 0, 0]].concat();
    let mut decoder = VcdiffDecoder::new(b"", 1 << 20);
    assert!(matches!(
        decoder.write(&[&HEADER[..], &w].concat()),
        Err(VcdiffError::OversizedField { .. })
    ));
    // Section lengths that do not add up to the window.
    let w = [&[0x00, 0x0D, 4, 0][..], &huge, &[0, 0]].concat();
    assert!(matches!(
        vcdiff::decode(b"", &[&HEADER[..], &w].concat(), 100),
        Err(VcdiffError::SizeMismatch { .. })
    ));
    // A source segment far beyond the source.
    let w = [&[0x01][..], &huge, &[0, 5, 1, 0, 0, 0, 0]].concat();
    assert!(matches!(
        vcdiff::decode(b"tiny", &[&HEADER[..], &w].concat(), 100),
        Err(VcdiffError::SegmentOutOfRange { .. })
    ));
    // An explicit instruction size beyond the window (ADD size 2^62 into a 4-byte window).
    let mut body = vec![4, 0, 0];
    body.push(1 + huge.len() as u8);
    body.push(0);
    body.push(1);
    body.extend_from_slice(&huge);
    let w = window(0x00, &[], &body);
    assert!(matches!(
        vcdiff::decode(b"", &[&HEADER[..], &w].concat(), 100),
        Err(VcdiffError::BadInstruction(_))
    ));
    // The application header length is bounded too.
    let delta = [&[0xD6, 0xC3, 0xC4, 0x00, 0x04][..], &huge].concat();
    assert!(matches!(
        vcdiff::decode(b"", &delta, 100),
        Err(VcdiffError::OversizedField { .. })
    ));
}

#[test]
fn the_limit_counts_all_windows() {
    let target = vec![7u8; 20_000];
    let delta = vcdiff::encode_with(
        b"",
        &target,
        &EncodeOptions {
            window_size: 4096,
            ..EncodeOptions::default()
        },
    );
    assert_eq!(vcdiff::decode(b"", &delta, 20_000).unwrap(), target);
    assert_eq!(
        vcdiff::decode(b"", &delta, 19_999).unwrap_err(),
        VcdiffError::LimitExceeded { limit: 19_999 }
    );
    assert_eq!(
        stream_decode(b"", &delta, 19_999, 100).unwrap_err(),
        VcdiffError::LimitExceeded { limit: 19_999 }
    );
}

#[test]
fn streaming_emits_window_by_window() {
    let source: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let target: Vec<u8> = source.iter().rev().copied().collect();
    let delta = vcdiff::encode_with(
        &source,
        &target,
        &EncodeOptions {
            window_size: 8192,
            ..EncodeOptions::default()
        },
    );
    let mut decoder = VcdiffDecoder::new(&source, target.len());
    let mut largest_emission = 0;
    let mut out = Vec::new();
    for chunk in delta.chunks(64) {
        let emitted = decoder.write(chunk).unwrap();
        largest_emission = largest_emission.max(emitted.len());
        out.extend(emitted);
    }
    decoder.finish().unwrap();
    assert_eq!(out, target);
    assert_eq!(
        largest_emission, 8192,
        "64-byte chunks complete at most one window at a time"
    );
}

#[test]
fn similar_inputs_give_small_deltas() {
    let source: Vec<u8> = (0..20_000u32)
        .flat_map(|i| format!("<li>item {i}</li>\n").into_bytes())
        .collect();
    let mut target = source.clone();
    target.splice(1000..1000, b"<li>inserted</li>\n".iter().copied());
    target.extend(std::iter::repeat_n(b' ', 5000));
    let delta = vcdiff::encode(&source, &target);
    assert!(delta.len() < 60, "{} bytes", delta.len());
    assert_eq!(
        vcdiff::decode(&source, &delta, target.len()).unwrap(),
        target
    );
    assert!(
        vcdiff::encode(&source, &source).len() < 25,
        "one window, one COPY"
    );
}
