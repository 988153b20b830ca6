//! Decompression bombs: 1 GiB of zeros, compressed by each codec's reference tool,
//! decoded with a 1 MiB limit. The decoder must stop near the limit: it fails, it has
//! read only the start of the input, and it never allocates anything near 1 GiB.
//!
//! This binary holds a single test so that its allocation counter sees nothing else.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::filter;
use wirefold_codec::{decompress, DecodeError, Decoder};
use wirefold_http::ContentCoding;

/// Counts live heap bytes and their high-water mark.
struct CountingAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

#[allow(unsafe_code)] // a global allocator is unsafe to implement; this one forwards to System
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

const BOMB_SIZE: u64 = 1 << 30;
const LIMIT: usize = 1 << 20;
/// Allowance for codec state: brotli's ring buffer (the CLI picks the largest window,
/// 16 MiB, for input of unknown size), zstd's window, the decoder's step buffer, and
/// the output up to the limit. Far below the 1 GiB the bomb expands to.
const STATE_ALLOWANCE: usize = 32 << 20;

/// 1 GiB of zeros compressed by the reference tool for `coding`, streamed so the tool
/// never holds it either.
fn bomb(coding: ContentCoding) -> Vec<u8> {
    let zeros = format!("head -c {BOMB_SIZE} /dev/zero");
    let script = match coding {
        ContentCoding::Gzip => format!("{zeros} | gzip -1 -c"),
        ContentCoding::Br => format!("{zeros} | brotli -q 1 -c"),
        ContentCoding::Zstd => format!("{zeros} | zstd -1 -c"),
        ContentCoding::Deflate => format!(
            "{zeros} | python3 -c 'import sys, zlib\n\
             c = zlib.compressobj(1)\n\
             for block in iter(lambda: sys.stdin.buffer.read(1 << 20), b\"\"):\n    \
             sys.stdout.buffer.write(c.compress(block))\n\
             sys.stdout.buffer.write(c.flush())'"
        ),
    };
    filter("sh", &["-c", &script], b"")
}

#[test]
fn bombs_stop_at_the_limit_without_allocating_the_expansion() {
    for coding in ContentCoding::ALL {
        let bomb = bomb(coding);

        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        assert_eq!(
            decompress(coding, &bomb, LIMIT),
            Err(DecodeError::TooLarge { limit: LIMIT })
        );
        let extra = PEAK.load(Ordering::Relaxed) - before;
        assert!(
            extra < STATE_ALLOWANCE,
            "{coding:?}: peak of {extra} bytes above baseline"
        );
        eprintln!(
            "{coding:?}: {} bytes of bomb, peak {extra} bytes above baseline",
            bomb.len()
        );

        // Streaming: the error comes while only the start of the input has been fed.
        let mut dec = Decoder::new(coding, LIMIT);
        let piece = 4096;
        let fed = bomb
            .chunks(piece)
            .position(|chunk| dec.write(chunk).is_err())
            .map(|pieces| (pieces + 1) * piece)
            .unwrap_or_else(|| panic!("{coding:?}: the whole bomb was accepted"));
        assert!(
            fed <= bomb.len() / 4,
            "{coding:?}: failed only after {fed} of {} bytes",
            bomb.len()
        );
    }
}
