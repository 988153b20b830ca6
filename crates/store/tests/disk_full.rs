//! Writes failing for lack of space suspend further writes; reads keep working.
//!
//! Two honest ways to run out of space: a real, tiny tmpfs (needs root and permission to
//! mount; skipped with a printed reason otherwise), and a file size limit (RLIMIT_FSIZE) set
//! in a child process, which runs anywhere.

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::content;
use wirefold_store::{Hash, Store, StoreConfig, StoreError};

/// A tmpfs mounted over a temp directory, unmounted when dropped (also during a panic).
struct TinyTmpfs {
    dir: tempfile::TempDir,
}

impl TinyTmpfs {
    fn mount(bytes: u64) -> Result<TinyTmpfs, String> {
        let dir = tempfile::tempdir().map_err(|err| err.to_string())?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|err| format!("cannot run mount: {err}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(TinyTmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TinyTmpfs {
    fn drop(&mut self) {
        match Command::new("umount").arg(self.dir.path()).status() {
            Ok(status) if status.success() => {}
            other => eprintln!("could not unmount {}: {other:?}", self.dir.path().display()),
        }
    }
}

fn config() -> StoreConfig {
    StoreConfig {
        max_bytes: 1 << 30,
        memory_bytes: 0,
        max_object_bytes: 1 << 20,
    }
}

/// Checks that every kind of write now fails fast, and that reads still work.
fn assert_suspended_but_readable(store: &Store, stored: &[(Hash, Vec<u8>)]) {
    let (first, _) = stored[0];
    assert!(matches!(
        store.put_blob(b"new"),
        Err(StoreError::WritesSuspended)
    ));
    assert!(matches!(
        store.blob_writer(),
        Err(StoreError::WritesSuspended)
    ));
    assert!(matches!(
        store.put_record("new", b"", &[first]),
        Err(StoreError::WritesSuspended)
    ));
    assert!(matches!(
        store.put_encoding(&first, "br-5", b"x"),
        Err(StoreError::WritesSuspended)
    ));
    for (hash, body) in stored {
        assert_eq!(store.get_blob(hash).unwrap().as_deref(), Some(&body[..]));
    }
    assert_eq!(store.get_record("before").unwrap().unwrap(), b"kept");
    assert_eq!(store.stats().blobs, stored.len() as u64);
}

fn assert_out_of_space(err: &StoreError, dir: &Path, kind: io::ErrorKind) {
    match err {
        StoreError::Io { path, source } => {
            assert!(path.starts_with(dir), "{err}");
            assert_eq!(source.kind(), kind, "{err}");
        }
        other => panic!("expected an I/O error, got {other}"),
    }
}

#[test]
fn a_full_disk_suspends_writes_and_reads_keep_working() {
    let tmpfs = match TinyTmpfs::mount(512 * 1024) {
        Ok(tmpfs) => tmpfs,
        Err(reason) => {
            println!(
                "skipping the tmpfs disk-full test: {reason} (the RLIMIT_FSIZE test still runs)"
            );
            return;
        }
    };
    let dir = tmpfs.path().join("store");
    let store = Store::open(&dir, config()).unwrap();
    let before = store.put_blob(b"before").unwrap();
    store.put_record("before", b"kept", &[before]).unwrap();
    let mut stored = vec![(before, b"before".to_vec())];
    let err = (1..100)
        .find_map(|seed| {
            let body = content(seed, 64 * 1024);
            match store.put_blob(&body) {
                Ok(hash) => {
                    stored.push((hash, body));
                    None
                }
                Err(err) => Some(err),
            }
        })
        .expect("a 512 KiB file system fills up");
    assert_out_of_space(&err, &dir, io::ErrorKind::StorageFull);
    assert!(stored.len() > 1, "some blobs fit before the disk filled");
    assert!(
        common::files_under(&dir.join("tmp")).is_empty(),
        "the failed write left its temp file"
    );
    assert_suspended_but_readable(&store, &stored);
    drop(store);
}

#[test]
fn an_index_that_cannot_grow_suspends_writes_and_reads_keep_working() {
    let tmpfs = match TinyTmpfs::mount(512 * 1024) {
        Ok(tmpfs) => tmpfs,
        Err(reason) => {
            println!("skipping the tmpfs index-full test: {reason}");
            return;
        }
    };
    let dir = tmpfs.path().join("store");
    let store = Store::open(&dir, config()).unwrap();
    let before = store.put_blob(b"before").unwrap();
    store.put_record("before", b"kept", &[before]).unwrap();
    fill(&tmpfs.path().join("filler"));
    let err = (0..1000)
        .find_map(|n| {
            store
                .put_record(&format!("record {n}"), &[7; 2000], &[before])
                .err()
        })
        .expect("the index cannot grow on a full file system");
    assert_out_of_space(&err, &dir, io::ErrorKind::StorageFull);
    assert_suspended_but_readable(&store, &[(before, b"before".to_vec())]);
    drop(store);

    std::fs::remove_file(tmpfs.path().join("filler")).unwrap();
    let store = Store::open(&dir, config()).unwrap();
    assert_eq!(store.get_record("before").unwrap().unwrap(), b"kept");
    assert_eq!(
        store.get_blob(&before).unwrap().as_deref(),
        Some(&b"before"[..])
    );
}

/// Writes a file at `path` until the file system has no space left.
fn fill(path: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    while file.write_all(&[0; 4096]).is_ok() {}
}

/// Set in the child process that runs the RLIMIT_FSIZE case.
const CHILD_ENV: &str = "WIREFOLD_STORE_FSIZE_CHILD";

#[test]
fn a_file_size_limit_suspends_writes_and_reads_keep_working() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        let dir = tempfile::tempdir().unwrap();
        let output = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_file_size_limit_suspends_writes_and_reads_keep_working",
                "--nocapture",
            ])
            .env(CHILD_ENV, dir.path())
            .output()
            .unwrap();
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "child failed:\n{report}");
        assert!(
            report.contains("1 passed"),
            "child did not run the test:\n{report}"
        );
        return;
    };
    limit_file_size(256 * 1024);
    let dir = PathBuf::from(dir).join("store");
    let store = Store::open(&dir, config()).unwrap();
    let before = store.put_blob(b"before").unwrap();
    store.put_record("before", b"kept", &[before]).unwrap();
    let err = store.put_blob(&content(1, 300 * 1024)).unwrap_err();
    assert_out_of_space(&err, &dir, io::ErrorKind::FileTooLarge);
    assert!(
        common::files_under(&dir.join("tmp")).is_empty(),
        "the failed write left its temp file"
    );
    assert_suspended_but_readable(&store, &[(before, b"before".to_vec())]);
}

/// Caps the size of any file this process writes; writes past it fail with EFBIG instead of
/// raising SIGXFSZ, which would kill the process.
#[allow(unsafe_code)] // std has no setrlimit or signal disposition
fn limit_file_size(bytes: u64) {
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain system calls on values owned here; this child process runs one test.
    unsafe {
        assert_ne!(libc::signal(libc::SIGXFSZ, libc::SIG_IGN), libc::SIG_ERR);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
}
