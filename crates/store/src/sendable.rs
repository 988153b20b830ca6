//! Large blobs of the local tier with a copy in an unnamed file of the store's
//! directory beside them, so that the network layer can send them with `sendfile(2)`
//! instead of copying them into each socket.
//!
//! A cached response's body is the same bytes for every client; copying them from
//! user space into the kernel per response is the largest cost of a cache hit on a
//! large body, and the one most at the mercy of the machine: on the 2-vCPU machines
//! measured, that copy of a 100 KB body ran at 9 µs for minutes and at 25–40 µs for
//! the next few (docs/benchmarks.md), where nginx sends its cache file by reference.
//! [`filed`] therefore gives a blob of at least [`MIN_SENDABLE`] bytes a heap copy of
//! its own and, beside it, a file: made unnamed in the store's directory (`O_TMPFILE |
//! O_EXCL`, so no name leads to it and none can be given to it) and written once.
//! Everything that reads the [`Bytes`] reads the heap, never the disk; [`file_of`] tells
//! a transport that a slice it is asked to write lies in such a heap copy, and where,
//! and the kernel sends the same bytes from the file's pages. A disk file's page cache,
//! unlike tmpfs here, holds large folios, which is what makes sending by reference
//! cheaper than the copy.
//!
//! The heap copy is reachable only through its [`Bytes`], so while a caller holds a
//! slice of it, the file [`file_of`] names stays open. A file is closed on a thread of
//! its own ([`close_later`]): closing an unnamed file frees its blocks, which may wait
//! on the file system's journal, and a blob's last [`Bytes`] may end on a reactor thread
//! or under the local tier's lock. The files take disk space in the store's directory
//! for as long as their blob is held: by the local tier, or by a response or a prepared
//! answer after it left the tier.
//!
//! Each file costs a descriptor: at most [`max_files`] exist at once; beyond that, or
//! when the directory's file system refuses one (no `O_TMPFILE`, a full disk), a blob is
//! kept on the heap alone.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{OnceLock, PoisonError, RwLock};

use bytes::Bytes;

/// Blobs at least this long get a file. Below it the copy costs no more than
/// `sendfile`'s second system call and page-by-page work: 20 KB went 16.1 → 18.5 µs
/// by file, 50 KB and 70 KB were even, 100 KB 31.7 → 31.2 at the median with none of
/// the copy's slow spells (docs/benchmarks.md).
pub const MIN_SENDABLE: usize = 64 << 10;

/// Files at most at once (descriptors are bounded per process); fewer when the
/// descriptor limit is low ([`max_files`]).
pub const MAX_FILES: usize = 1024;

/// The files allowed at once: [`MAX_FILES`], or a quarter of this process's descriptor
/// limit if that is less, so that connections never run short of descriptors for them
/// (the usual soft limit is 1,024).
fn max_files() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
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

/// Where each filed heap copy starts: its length and its file's descriptor.
static FILED: RwLock<BTreeMap<usize, (usize, RawFd)>> = RwLock::new(BTreeMap::new());
/// Files made and not yet closed (reserved before one is made).
static FILES: AtomicUsize = AtomicUsize::new(0);

/// A copy of `data` with a file beside it, when it is long enough, `dir` is given and
/// a file can be had; `None` otherwise (the caller keeps `data` on the heap alone).
pub(crate) fn filed(dir: Option<&Path>, data: &[u8]) -> Option<Bytes> {
    let dir = dir.filter(|_| data.len() >= MIN_SENDABLE)?;
    if FILES.fetch_add(1, Ordering::AcqRel) >= max_files() {
        FILES.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    match unnamed_file(dir, data) {
        Ok(file) => Some(Bytes::from_owner(Filed::new(data, file))),
        Err(error) => {
            FILES.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(%error, dir = %dir.display(), "a blob is kept on the heap alone: no file for it");
            None
        }
    }
}

/// The file holding the same bytes as `slice`, and the slice's offset in it; `None`
/// when `slice` is empty or not (wholly) in a filed heap copy. The descriptor is
/// borrowed for as long as the slice is: the slice keeps its copy alive, and the copy
/// its file.
pub fn file_of(slice: &[u8]) -> Option<(BorrowedFd<'_>, u64)> {
    // An empty slice may point just past a copy, into memory that does not keep it.
    if slice.is_empty() {
        return None;
    }
    let start = slice.as_ptr() as usize;
    let filed = FILED.read().unwrap_or_else(PoisonError::into_inner);
    let (&base, &(len, fd)) = filed.range(..=start).next_back()?;
    if start + slice.len() > base + len {
        return None;
    }
    // SAFETY: the copy at `base` contains `slice`, so a `Bytes` of it is alive for the
    // slice's lifetime (the copy is reachable only through its `Bytes`), and the copy
    // owns `fd`, which is closed only after the copy is unregistered.
    #[allow(unsafe_code)]
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    Some((fd, (start - base) as u64))
}

/// Files currently held (for the store's statistics and tests).
pub fn files_held() -> usize {
    FILED.read().unwrap_or_else(PoisonError::into_inner).len()
}

/// `data` written into a new unnamed file of `dir`.
#[allow(unsafe_code)] // O_TMPFILE has no std API
fn unnamed_file(dir: &Path, data: &[u8]) -> io::Result<File> {
    let dir = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // O_EXCL: the file can never be given a name (`linkat`); it ends with its descriptor.
    let flags = libc::O_TMPFILE | libc::O_RDWR | libc::O_EXCL | libc::O_CLOEXEC;
    // SAFETY: a C string and flags; the result is checked.
    let fd = unsafe { libc::open(dir.as_ptr(), flags, 0o600) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(data)?;
    Ok(file)
}

/// A heap copy of a blob and the file holding the same bytes, registered in [`FILED`].
struct Filed {
    data: Box<[u8]>,
    file: Option<File>,
}

impl Filed {
    fn new(data: &[u8], file: File) -> Filed {
        let fd = file.as_raw_fd();
        let filed = Filed {
            data: data.into(),
            file: Some(file),
        };
        FILED
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(filed.data.as_ptr() as usize, (filed.data.len(), fd));
        filed
    }
}

impl AsRef<[u8]> for Filed {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Filed {
    fn drop(&mut self) {
        // Unregistered first: no lookup may name the file once it starts closing.
        FILED
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(self.data.as_ptr() as usize));
        if let Some(file) = self.file.take() {
            close_later(file);
        }
    }
}

/// Closes `file` on the closing thread (started on first use), or here if it cannot be
/// had; counts it out of [`FILES`] once closed.
fn close_later(file: File) {
    static CLOSER: OnceLock<Option<Sender<File>>> = OnceLock::new();
    let closer = CLOSER.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<File>();
        std::thread::Builder::new()
            .name("wirefold-file-closer".into())
            .spawn(move || {
                for file in receiver {
                    drop(file);
                    FILES.fetch_sub(1, Ordering::AcqRel);
                }
            })
            .ok()
            .map(|_| sender)
    });
    let unsent = match closer {
        Some(sender) => sender.send(file).err().map(|e| e.0),
        None => Some(file),
    };
    if let Some(file) = unsent {
        drop(file);
        FILES.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_blobs_stay_on_the_heap_alone() {
        let dir = tempfile::tempdir().unwrap();
        assert!(filed(Some(dir.path()), &vec![7; MIN_SENDABLE - 1]).is_none());
    }

    #[test]
    fn a_large_blob_has_a_file_that_holds_its_bytes_and_has_no_name() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..MIN_SENDABLE * 3).map(|i| (i % 251) as u8).collect();
        let bytes = filed(Some(dir.path()), &data).expect("a file");
        assert_eq!(&bytes[..], &data[..]);
        let (fd, offset) = file_of(&bytes[100..5000]).expect("the slice is in a filed copy");
        assert_eq!(offset, 100);
        let file = File::from(fd.try_clone_to_owned().unwrap());
        let mut read = vec![0; data.len()];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut read, 0).unwrap();
        assert_eq!(read, data);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // The caller's bytes and an empty slice at the copy's end are in no file.
        assert!(file_of(&data[..]).is_none());
        assert!(file_of(&bytes[bytes.len()..]).is_none());
    }

    #[test]
    fn a_slice_keeps_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = filed(Some(dir.path()), &vec![1u8; MIN_SENDABLE]).expect("a file");
        let slice = bytes.slice(10..20);
        drop(bytes);
        let (_, offset) = file_of(&slice).expect("a slice keeps the file");
        assert_eq!(offset, 10);
    }

    #[test]
    fn without_a_file_a_large_blob_stays_on_the_heap_alone() {
        let dir = tempfile::tempdir().unwrap();
        let data = vec![2u8; MIN_SENDABLE];
        for refused in [Some(dir.path().join("gone")), None] {
            assert!(filed(refused.as_deref(), &data).is_none());
        }
    }
}
