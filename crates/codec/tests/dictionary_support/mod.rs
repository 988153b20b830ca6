//! Helpers shared by the dictionary integration tests.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;
use std::process::Command;

use brotlic_sys as sys;

/// The shared corpus (../shared/corpus beside the repository).
pub fn corpus(path: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus")
        .join(path);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Two consecutive versions of a real page: (dictionary, data).
pub fn html_pair() -> (Vec<u8>, Vec<u8>) {
    (
        corpus("html/w3c__manifest/index-html--recent/011.html"),
        corpus("html/w3c__manifest/index-html--recent/012.html"),
    )
}

/// Runs a command, failing the test on a non-zero exit; returns stdout.
pub fn run(program: &str, args: &[&std::ffi::OsStr]) -> Vec<u8> {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("starting {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A brotli CLI with `-D` (raw dictionary; brotli ≥ 1.1): `$WIREFOLD_BROTLI_CLI`,
/// else `brotli` on PATH if it has the option (Debian's 1.0.9 has not).
pub fn brotli_cli_with_dictionary() -> Option<String> {
    let candidates = std::env::var("WIREFOLD_BROTLI_CLI")
        .into_iter()
        .chain(["brotli".to_string()]);
    candidates.into_iter().find(|cli| {
        Command::new(cli).arg("-h").output().is_ok_and(|out| {
            String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).contains("--dictionary")
        })
    })
}

/// Decodes a brotli stream with Google's C decoder and `dictionary` attached as a
/// raw prefix: an implementation independent of ours. `None` on any failure.
#[allow(unsafe_code)] // FFI to Google's C brotli decoder
pub fn c_brotli_decode(dictionary: &[u8], stream: &[u8]) -> Option<Vec<u8>> {
    struct Decoder(*mut sys::BrotliDecoderState);
    impl Drop for Decoder {
        fn drop(&mut self) {
            // SAFETY: created by BrotliDecoderCreateInstance, destroyed once.
            unsafe { sys::BrotliDecoderDestroyInstance(self.0) }
        }
    }
    // SAFETY: null allocators select malloc/free.
    let raw = unsafe { sys::BrotliDecoderCreateInstance(None, None, std::ptr::null_mut()) };
    if raw.is_null() {
        return None;
    }
    let decoder = Decoder(raw);
    // SAFETY: `dictionary` is borrowed for the whole call, so it outlives `decoder`.
    let attached = dictionary.is_empty()
        || unsafe {
            sys::BrotliDecoderAttachDictionary(
                decoder.0,
                sys::BrotliSharedDictionaryType_BROTLI_SHARED_DICTIONARY_RAW,
                dictionary.len(),
                dictionary.as_ptr(),
            ) != 0
        };
    if !attached {
        return None;
    }
    let (mut next_in, mut available_in) = (stream.as_ptr(), stream.len());
    let mut output = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let (mut next_out, mut available_out) = (chunk.as_mut_ptr(), chunk.len());
        // SAFETY: the pointers and counts describe `stream`'s unread tail and `chunk`.
        let result = unsafe {
            sys::BrotliDecoderDecompressStream(
                decoder.0,
                &mut available_in,
                &mut next_in,
                &mut available_out,
                &mut next_out,
                std::ptr::null_mut(),
            )
        };
        output.extend_from_slice(&chunk[..chunk.len() - available_out]);
        match result {
            sys::BrotliDecoderResult_BROTLI_DECODER_RESULT_SUCCESS if available_in == 0 => {
                return Some(output)
            }
            sys::BrotliDecoderResult_BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT => continue,
            _ => return None,
        }
    }
}
