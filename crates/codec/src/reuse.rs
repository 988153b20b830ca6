//! Working memory of one-shot compressions, kept (bounded) for the next ones.
//!
//! A compression at an on-the-fly level takes a few milliseconds, and its encoder's
//! tables (hash chains, ring buffer, zstd's context) are hundreds of KiB to MiBs:
//! above the server's fixed mmap threshold (`wirefold`'s `allocator.rs`), so each is
//! a fresh mapping, zeroed page by page on first touch and unmapped when freed,
//! which in a multi-threaded process costs every other core a TLB flush. Measured on
//! the ~100 KB corpus page, br at level 4: 4.8 ms of CPU per request this way
//! against 1.8 ms with the memory reused (docs/benchmarks.md, "Compression's working
//! memory"). So what the last compressions freed is kept, bounded for the whole
//! process (not per thread: the blocking pools have dozens), for the next ones:
//! brotli's blocks by type and length ([`Recycling`], given to the encoder as its
//! allocator), zstd's whole contexts ([`with_zstd`]). Only at on-the-fly levels: a
//! cached level's compression runs once per content, and what it frees goes back.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// The most the process keeps of brotli's freed blocks, in bytes.
const BROTLI_KEPT_BYTES: usize = 24 * 1024 * 1024;
/// The most zstd contexts kept (each a few MiB at the levels kept).
const ZSTD_KEPT_CONTEXTS: usize = 8;
/// Blocks smaller than this come cheaply from malloc's heaps: not kept.
const SMALL_BLOCK_BYTES: usize = 16 * 1024;
/// zstd contexts are kept for levels up to this one; a higher level's context is
/// tens of MiB, and those levels run once per content (cached encodings).
pub const ZSTD_KEPT_MAX_LEVEL: i32 = 9;
/// brotli's blocks are taken and kept for qualities up to this one, likewise: 10 and
/// 11 (cached encodings, once per content) work in tables of other sizes, several
/// MiB, that no on-the-fly quality asks for again and that would only sit in the
/// process (9.6 MB of its 29.7 at rest: docs/benchmarks.md, "the process at rest").
pub const BROTLI_KEPT_MAX_QUALITY: u32 = 9;

/// A block brotli's encoder works in.
pub struct Block<T>(Box<[T]>);

impl<T> Default for Block<T> {
    fn default() -> Self {
        Block(Box::new([]))
    }
}

impl<T> brotli::SliceWrapper<T> for Block<T> {
    fn slice(&self) -> &[T] {
        &self.0
    }
}

impl<T> brotli::SliceWrapperMut<T> for Block<T> {
    fn slice_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

/// Freed blocks by element type and length.
#[derive(Default)]
struct Kept {
    blocks: HashMap<(TypeId, usize), Vec<Box<dyn Any + Send>>>,
    bytes: usize,
}

impl Kept {
    fn take<T: 'static>(&mut self, len: usize, bytes: usize) -> Option<Box<[T]>> {
        let block = self.blocks.get_mut(&(TypeId::of::<T>(), len))?.pop()?;
        self.bytes -= bytes;
        block.downcast::<Box<[T]>>().ok().map(|block| *block)
    }

    /// Keeps `block` unless that would hold more than `limit` bytes.
    fn keep<T: Send + 'static>(&mut self, block: Box<[T]>, bytes: usize, limit: usize) {
        if self.bytes + bytes <= limit {
            self.bytes += bytes;
            self.blocks
                .entry((TypeId::of::<T>(), block.len()))
                .or_default()
                .push(Box::new(block));
        }
    }
}

static KEPT: LazyLock<Mutex<Kept>> = LazyLock::new(Mutex::default);

/// The kept blocks (a panic elsewhere leaves them consistent: each change is one
/// step).
fn kept() -> MutexGuard<'static, Kept> {
    KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// brotli's allocator: blocks come from what previous compressions freed when one
/// of the same type and length is kept (reset to the element's default, as a new
/// one would be), else from the heap.
#[derive(Clone, Copy, Default)]
pub struct Recycling;

impl<T: Clone + Default + Send + 'static> brotli::Allocator<T> for Recycling {
    type AllocatedMemory = Block<T>;

    fn alloc_cell(&mut self, len: usize) -> Block<T> {
        let bytes = len * std::mem::size_of::<T>();
        if bytes >= SMALL_BLOCK_BYTES {
            let kept = kept().take::<T>(len, bytes);
            if let Some(mut block) = kept {
                block.fill(T::default());
                return Block(block);
            }
        }
        Block(vec![T::default(); len].into_boxed_slice())
    }

    fn free_cell(&mut self, block: Block<T>) {
        let len = block.0.len();
        let bytes = len * std::mem::size_of::<T>();
        if bytes < SMALL_BLOCK_BYTES {
            return;
        }
        kept().keep(block.0, bytes, BROTLI_KEPT_BYTES);
    }
}

impl brotli::enc::BrotliAlloc for Recycling {}

static ZSTD: Mutex<Vec<zstd::bulk::Compressor<'static>>> = Mutex::new(Vec::new());

/// Runs `work` with a kept zstd context, or a new one (`None` when it cannot be
/// made), and keeps it after for the next, up to [`ZSTD_KEPT_CONTEXTS`].
pub fn with_zstd<R>(work: impl FnOnce(Option<&mut zstd::bulk::Compressor<'static>>) -> R) -> R {
    let contexts = || ZSTD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let kept = contexts().pop();
    let mut context =
        kept.or_else(|| zstd::bulk::Compressor::new(zstd::DEFAULT_COMPRESSION_LEVEL).ok());
    let result = work(context.as_mut());
    if let Some(context) = context {
        let mut contexts = contexts();
        if contexts.len() < ZSTD_KEPT_CONTEXTS {
            contexts.push(context);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use brotli::{Allocator, SliceWrapper};

    #[test]
    fn blocks_are_kept_by_type_and_length_within_the_limit() {
        let mut kept = Kept::default();
        let block: Box<[u32]> = vec![7; 1000].into_boxed_slice();
        let address = block.as_ptr();
        kept.keep(block, 4000, 10_000);
        assert!(kept.take::<u16>(1000, 2000).is_none(), "another type");
        assert!(kept.take::<u32>(999, 3996).is_none(), "another length");
        let again = kept.take::<u32>(1000, 4000).unwrap();
        assert_eq!(again.as_ptr(), address);
        assert_eq!(kept.bytes, 0);
        for _ in 0..3 {
            kept.keep(vec![0u8; 4000].into_boxed_slice(), 4000, 10_000);
        }
        assert_eq!(kept.bytes, 8000, "the third would pass the limit");
    }

    #[test]
    fn a_block_brotli_gets_again_is_reset() {
        let mut alloc = Recycling;
        let mut block: Block<u64> = alloc.alloc_cell(100_003);
        brotli::SliceWrapperMut::slice_mut(&mut block).fill(7);
        alloc.free_cell(block);
        let again: Block<u64> = alloc.alloc_cell(100_003);
        assert!(again.slice().iter().all(|&x| x == 0));
    }

    #[test]
    fn a_kept_zstd_context_starts_each_frame_afresh() {
        // The second frame must not depend on the first (a context keeps its
        // parameters, never its history, between frames).
        let (first, second) = (vec![b'a'; 10_000], vec![b'b'; 20_000]);
        for data in [first, second] {
            let out = with_zstd(|context| {
                let context = context.unwrap();
                context.set_compression_level(3).unwrap();
                context.compress(&data).unwrap()
            });
            assert_eq!(zstd::bulk::decompress(&out, data.len()).unwrap(), data);
        }
    }
}
