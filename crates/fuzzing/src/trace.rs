//! `trace`: the lab's HAR and WARC readers (`lab::trace::open`) over a file made of
//! the input.
//!
//! Input: a flags byte, then the file. Flags: bit 0 compresses the file as one gzip
//! member (a gzip-per-record WARC), bit 1 puts `WARC/1.1\r\n` before it. The readers
//! take a path, so the file is written to a scratch directory first. Invariants: no
//! panic, every record yields an `Exchange` or a `Skipped`, bodies stay within
//! `max_body`, and reading ends.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use flate2::write::GzEncoder;
use flate2::Compression;
use lab::trace::{self, TraceLimits};

const LIMITS: TraceLimits = TraceLimits {
    max_body: 1 << 16,
    max_har: 1 << 20,
};

/// One scratch file per process (libFuzzer runs one input at a time per process; the
/// replay test runs its seeds in one thread), removed after each input.
fn scratch() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        std::env::temp_dir().join(format!("wirefold-fuzz-trace-{}", std::process::id()))
    })
}

pub fn trace(input: &[u8]) {
    run(input);
}

/// [`trace()`], counting the exchanges read.
pub fn run(input: &[u8]) -> usize {
    let Some((&flags, rest)) = input.split_first() else {
        return 0;
    };
    let mut file = Vec::new();
    if flags & 2 != 0 {
        file.extend_from_slice(b"WARC/1.1\r\n");
    }
    file.extend_from_slice(rest);
    if flags & 1 != 0 {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        if gz.write_all(&file).is_err() {
            return 0;
        }
        match gz.finish() {
            Ok(bytes) => file = bytes,
            Err(_) => return 0,
        }
    }
    let path = scratch();
    if std::fs::write(path, &file).is_err() {
        return 0;
    }
    let exchanges = read(path, file.len());
    let _ = std::fs::remove_file(path);
    exchanges
}

fn read(path: &Path, file_len: usize) -> usize {
    let Ok(items) = trace::open(path, LIMITS) else {
        return 0;
    };
    // Every item takes at least one byte of the file, or is one HAR entry (which takes
    // more than one): a reader that yields more is looping.
    let bound = file_len + 16;
    let mut count = 0;
    let mut exchanges = 0;
    for item in items {
        count += 1;
        assert!(
            count <= bound,
            "the reader yields more items than the file has bytes"
        );
        if let Ok(exchange) = item {
            exchanges += 1;
            if let Some(body) = &exchange.body {
                assert!(body.len() <= LIMITS.max_body, "a body over max_body");
            }
        }
    }
    exchanges
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The valid seeds are read as the exchanges they hold.
    #[test]
    fn valid_seeds_are_read() {
        for (name, exchanges) in [("warc-plain", 2), ("warc-gzip", 2), ("har", 2)] {
            let path = format!("{}/seeds/trace/{name}", env!("CARGO_MANIFEST_DIR"));
            let input = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(run(&input), exchanges, "{name}");
        }
    }
}
