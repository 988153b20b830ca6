//! Large blobs held in unnamed files of the store's directory, so that the network
//! layer can send them with `sendfile(2)` instead of copying them into each socket.
//!
//! A cached response's body is the same bytes for every client; copying them from
//! user space into the kernel per response is the largest cost of a cache hit on a
//! large body, and the one most at the mercy of the machine: on the 2-vCPU machines
//! measured, that copy of a 100 KB body ran at 9 µs for minutes and at 25–40 µs for
//! the next few (docs/benchmarks.md), where nginx sends its cache file by reference.
//! The local tier therefore keeps a blob of at least [`MIN_SENDABLE`] bytes in a file
//! of its own: made unnamed in the store's directory (`O_TMPFILE | O_EXCL`, so no name
//! ever leads to it and none can be given to it), written once, never written again,
//! and mapped read-only. Its [`Bytes`] read like any others; [`file_of`] tells a
//! transport that a slice it is asked to write lies in such a file, and where, and the
//! kernel sends the file's pages. A disk file's page cache, unlike tmpfs here, holds
//! large folios, which is what makes sending by reference cheaper than the copy.
//!
//! A mapping and its descriptor live as long as any [`Bytes`] of it; a slice of one can
//! only be had through such a [`Bytes`], so while a caller holds the slice, the file
//! [`file_of`] names stays open and mapped. The files take disk space in the store's
//! directory (at most what the local tier holds) until their blob leaves the local tier.
//!
//! Each file costs a descriptor and a mapping: at most [`max_files`] exist at once;
//! beyond that, or when the directory's file system refuses one (no `O_TMPFILE`, a full
//! disk), a blob is kept on the heap as before.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};

use bytes::Bytes;

/// Blobs at least this long get a file. Below it the copy costs no more than
/// `sendfile`'s second system call and page-by-page work: 20 KB went 16.1 → 18.5 µs
/// by file, 50 KB and 70 KB were even, 100 KB 31.7 → 31.2 at the median with none of
/// the copy's slow spells (docs/benchmarks.md).
pub const MIN_SENDABLE: usize = 64 << 10;

/// Files at most at once (descriptors and mappings are bounded per process); fewer
/// when the descriptor limit is low ([`max_files`]).
pub const MAX_FILES: usize = 1024;

/// The files allowed at once: [`MAX_FILES`], or a quarter of this process's descriptor
/// limit if that is less, so that connections never run short of descriptors for them
/// (the usual soft limit is 1,024).
fn max_files() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given; the result is checked.
        #[allow(unsafe_code)]
        let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        let quarter = usize::try_from(limit.rlim_cur / 4).unwrap_or(usize::MAX);
        if known {
            MAX_FILES.min(quarter)
        } else {
            0
        }
    })
}

/// Where each live mapping starts: its length and its file's descriptor.
static MAPPINGS: RwLock<BTreeMap<usize, (usize, RawFd)>> = RwLock::new(BTreeMap::new());
/// Files made and not yet dropped (reserved before one is made).
static FILES: AtomicUsize = AtomicUsize::new(0);

/// `data` in an unnamed file of `dir`, when it is long enough and a file can be had;
/// `None` otherwise (the caller keeps its heap copy).
pub(crate) fn sendable(dir: &Path, data: &[u8]) -> Option<Bytes> {
    if data.len() < MIN_SENDABLE {
        return None;
    }
    if FILES.fetch_add(1, Ordering::AcqRel) >= max_files() {
        FILES.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    match Mapping::of(dir, data) {
        Ok(mapping) => Some(Bytes::from_owner(mapping)),
        Err(error) => {
            FILES.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(%error, dir = %dir.display(), "a blob is kept on the heap: no file for it");
            None
        }
    }
}

/// The file `slice` lies in, and the slice's offset in it; `None` when it is not
/// (wholly) in one. The descriptor is borrowed for as long as the slice is: the slice
/// keeps its mapping alive, and the mapping its file.
pub fn file_of(slice: &[u8]) -> Option<(BorrowedFd<'_>, u64)> {
    let start = slice.as_ptr() as usize;
    let mappings = MAPPINGS.read().unwrap_or_else(PoisonError::into_inner);
    let (&base, &(len, fd)) = mappings.range(..=start).next_back()?;
    if start + slice.len() > base + len {
        return None;
    }
    // SAFETY: the mapping at `base` contains `slice`, so a `Bytes` of it is alive for
    // the slice's lifetime (no other path leads into a mapping), and the mapping owns
    // `fd`, which is closed only after the mapping is unregistered.
    #[allow(unsafe_code)]
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    Some((fd, (start - base) as u64))
}

/// Files currently held (for the store's statistics and tests).
pub fn files_held() -> usize {
    MAPPINGS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .len()
}

/// An unnamed file and its read-only mapping, registered in [`MAPPINGS`].
struct Mapping {
    ptr: *const u8,
    len: usize,
    file: File,
}

// SAFETY: the mapping is read-only, and its file is written only before it is mapped,
// so sharing or moving its pointer between threads is sound.
#[allow(unsafe_code)]
unsafe impl Send for Mapping {}
#[allow(unsafe_code)]
unsafe impl Sync for Mapping {}

impl Mapping {
    #[allow(unsafe_code)] // O_TMPFILE and mmap have no std API
    fn of(dir: &Path, data: &[u8]) -> io::Result<Mapping> {
        let dir = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // O_EXCL: the file can never be given a name (`linkat`); it ends with its
        // descriptor.
        let flags = libc::O_TMPFILE | libc::O_RDWR | libc::O_EXCL | libc::O_CLOEXEC;
        // SAFETY: a C string and flags; the result is checked.
        let fd = unsafe { libc::open(dir.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        let mut file = unsafe { File::from_raw_fd(fd) };
        file.write_all(data)?;
        // SAFETY: a new read-only mapping of the whole file we own; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                data.len(),
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mapping = Mapping {
            ptr: ptr.cast::<u8>().cast_const(),
            len: data.len(),
            file,
        };
        MAPPINGS
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                mapping.ptr as usize,
                (mapping.len, mapping.file.as_fd().as_raw_fd()),
            );
        Ok(mapping)
    }
}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until `drop`, and they never change.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr, self.len)
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Unregistered first: no lookup may name the file once it starts closing.
        MAPPINGS
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(self.ptr as usize));
        // SAFETY: the mapping made in `of`, unmapped once; no `Bytes` of it is left.
        #[allow(unsafe_code)]
        unsafe {
            libc::munmap(self.ptr.cast_mut().cast(), self.len);
        }
        FILES.fetch_sub(1, Ordering::AcqRel);
        // `file` closes after this.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_blobs_stay_on_the_heap() {
        let dir = tempfile::tempdir().unwrap();
        assert!(sendable(dir.path(), &vec![7; MIN_SENDABLE - 1]).is_none());
    }

    #[test]
    fn a_blob_reads_back_from_a_file_that_has_no_name() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..MIN_SENDABLE * 3).map(|i| (i % 251) as u8).collect();
        let bytes = sendable(dir.path(), &data).expect("a file");
        assert_eq!(&bytes[..], &data[..]);
        let (fd, offset) = file_of(&bytes[100..5000]).expect("the slice is in the file");
        assert_eq!(offset, 100);
        // The file holds exactly the blob, and nothing in the directory names it.
        let file = File::from(fd.try_clone_to_owned().unwrap());
        let mut read = vec![0; data.len()];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut read, 0).unwrap();
        assert_eq!(read, data);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // A slice of another allocation is in no file.
        assert!(file_of(&data[..]).is_none());
    }

    #[test]
    fn a_slice_keeps_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let data = vec![1u8; MIN_SENDABLE];
        let bytes = sendable(dir.path(), &data).expect("a file");
        let slice = bytes.slice(10..20);
        drop(bytes);
        let (_, offset) = file_of(&slice).expect("a slice keeps the file");
        assert_eq!(offset, 10);
    }

    #[test]
    fn a_directory_that_gives_no_file_leaves_the_blob_on_the_heap() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        assert!(sendable(&gone, &vec![2; MIN_SENDABLE]).is_none());
    }
}
