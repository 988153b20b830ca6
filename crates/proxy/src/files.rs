//! The file source (`--root`): maps a request path to a regular file inside the root,
//! never outside it, and yields its content with validators.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
#[cfg(test)]
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::HeaderValue;
use store::{Hash, Store};

use store::memo::Bounded;

use crate::file_watch::{DirWatch, Stamp};
use crate::model::{content_etag, etag_value, FileMark};
use wirefold_http::conditional::EntityTag;

/// What a request path resolves to: kept for `RESOLUTION_TTL` and shared, not
/// copied, by the requests that use it.
pub struct Resolution {
    /// The canonical path of the file, inside the root.
    pub path: Arc<Path>,
    pub content_type: String,
    /// `content_type` as a field value.
    pub content_type_value: HeaderValue,
    /// The request path names a version (`url_pattern::is_versioned`).
    pub versioned: bool,
    /// The file's size and modification time as last read, when, and the state of
    /// its directories just before.
    checked: Mutex<Checked>,
}

struct Checked {
    at: Instant,
    len: u64,
    modified: SystemTime,
    /// `None` when the file source watches no directories, not this file's, the file
    /// has more than one name, or its directory was too busy to be worth watching.
    stamp: Option<Stamp>,
}

impl Resolution {
    fn checked(&self) -> MutexGuard<'_, Checked> {
        self.checked.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A file found under the root.
pub struct FoundFile {
    pub resolution: Arc<Resolution>,
    pub len: u64,
    pub modified: SystemTime,
}

impl FoundFile {
    pub fn path(&self) -> &Path {
        &self.resolution.path
    }

    /// The file as found: a later request finds the same file unchanged when it finds
    /// the same mark.
    pub fn mark(&self) -> FileMark {
        FileMark {
            path: self.resolution.path.clone(),
            len: self.len,
            modified: self.modified,
        }
    }
}

/// One version of a file that was read whole: its hash and the fields that name it,
/// made once per version rather than per request.
pub struct FileVersion {
    pub len: u64,
    pub modified: SystemTime,
    pub hash: Hash,
    /// The strong `ETag` of its content.
    pub etag: HeaderValue,
    /// None for a modification time no HTTP date can express (before 1970, after 9999).
    pub last_modified: Option<HeaderValue>,
}

impl FileVersion {
    fn new(len: u64, modified: SystemTime, hash: Hash) -> FileVersion {
        FileVersion {
            len,
            modified,
            hash,
            etag: etag_value(&EntityTag::strong(content_etag(&hash))),
            last_modified: http_date(modified),
        }
    }
}

/// A time as an HTTP date field value; None outside the years HTTP dates express (a
/// file's mtime can be anything).
pub fn http_date(time: SystemTime) -> Option<HeaderValue> {
    wirefold_http::format_http_date(time).and_then(|date| HeaderValue::from_str(&date).ok())
}

/// What a file read yields: the whole content with its version, or (for large files)
/// a handle to stream it from.
pub enum FileContent {
    /// `from_store`: this version was read from the store's copy, so it is stored already.
    Whole {
        bytes: Bytes,
        version: Arc<FileVersion>,
        from_store: bool,
    },
    Large(tokio::fs::File),
}

pub struct FileSource {
    /// Canonical root: every served path must canonicalize under it.
    root: PathBuf,
    /// `files.serve_dotfiles`: serve names starting with `.` (see [`is_dotfile_path`]).
    serve_dotfiles: bool,
    /// Versions of files already read, keyed by path and invalidated by a
    /// changed size or modification time, so a hit costs a `stat` at most, not a read.
    known: Mutex<HashMap<PathBuf, Arc<FileVersion>>>,
    /// Recent resolutions, by request path.
    resolved: Bounded<String, Arc<Resolution>>,
    /// Change notification for the directories of the files served; `None` without
    /// inotify or on a file system it cannot vouch for.
    watch: Option<DirWatch>,
    /// How many times a file's metadata was read (what the watch saves).
    #[cfg(test)]
    stats: AtomicU64,
}

/// How long a resolution is trusted before the path is walked again.
const RESOLUTION_TTL: std::time::Duration = std::time::Duration::from_secs(1);
/// A stamp voided sooner than this after its check was taken in a busy directory (a
/// log written beside the file): watching it again would cost more than the `stat`s
/// it saves, so the file is `stat`ed per request until its resolution is made again.
const SHORTEST_USEFUL_STAMP: Duration = Duration::from_millis(100);
const RESOLUTION_CAPACITY: usize = 16_384;

impl FileSource {
    pub fn new(root: &Path, serve_dotfiles: bool) -> std::io::Result<FileSource> {
        let root = root.canonicalize()?;
        Ok(FileSource {
            watch: DirWatch::new(&root),
            root,
            serve_dotfiles,
            known: Mutex::new(HashMap::new()),
            resolved: Bounded::with_entries(RESOLUTION_CAPACITY).expiring_after(RESOLUTION_TTL),
            #[cfg(test)]
            stats: AtomicU64::new(0),
        })
    }

    /// Resolves a request path. `None` (served as 404) for anything that is not a
    /// regular file inside the root: `..` segments (also percent-encoded), NUL bytes,
    /// symlinks leading out of the root, directories without `index.html`, a file
    /// named as a directory (`/file.txt/`), and dotfiles unless configured (whether
    /// the request or a symlink's target names them).
    ///
    /// A path resolved within the last second is trusted as it was last read while
    /// no directory on its way reports a change ([`crate::file_watch`]), else
    /// checked with one `stat` of its canonical file instead of a `readlink` per
    /// component; and trusted anyway while the last check is younger than `trust`
    /// (`files.check_interval_ms`; cf. nginx's `open_file_cache_valid`). A file
    /// that is no longer regular is resolved afresh.
    pub fn resolve(&self, request_path: &str, trust: Duration) -> Option<FoundFile> {
        if let Some(resolution) = self.resolved.get(request_path) {
            let worth_stamping = {
                let last = resolution.checked();
                let trusted = (!trust.is_zero() && last.at.elapsed() < trust)
                    || self
                        .watch
                        .as_ref()
                        .zip(last.stamp.as_ref())
                        .is_some_and(|(watch, stamp)| watch.unchanged(stamp));
                if trusted {
                    let (len, modified) = (last.len, last.modified);
                    drop(last);
                    return Some(FoundFile {
                        len,
                        modified,
                        resolution,
                    });
                }
                last.stamp.is_some() && last.at.elapsed() >= SHORTEST_USEFUL_STAMP
            };
            // A file that could not be watched, or whose stamp did not last, is not
            // watched again per request: when the resolution is made again.
            let stamp = worth_stamping
                .then(|| self.stamp(&resolution.path))
                .flatten();
            self.count_stat();
            if let Ok(meta) = std::fs::symlink_metadata(&resolution.path) {
                if meta.is_file() {
                    if let Ok(modified) = meta.modified() {
                        *resolution.checked() = Checked {
                            at: Instant::now(),
                            len: meta.len(),
                            modified,
                            stamp: stamp.filter(|_| meta.nlink() == 1),
                        };
                        return Some(FoundFile {
                            len: meta.len(),
                            modified,
                            resolution,
                        });
                    }
                }
            }
        }
        let found = self.resolve_uncached(request_path)?;
        self.resolved
            .insert(request_path.to_string(), found.resolution.clone());
        Some(found)
    }

    /// The state of the directories on `canonical`'s way, before its metadata is read.
    fn stamp(&self, canonical: &Path) -> Option<Stamp> {
        self.watch.as_ref()?.stamp(canonical)
    }

    /// Counts a read of a file's metadata (what the watch saves), in tests.
    fn count_stat(&self) {
        #[cfg(test)]
        self.stats
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn resolve_uncached(&self, request_path: &str) -> Option<FoundFile> {
        let decoded = percent_encoding::percent_decode_str(request_path)
            .decode_utf8()
            .ok()?;
        if decoded.contains('\0') || decoded.contains('\\') {
            return None;
        }
        let mut relative = PathBuf::new();
        for component in Path::new(decoded.trim_start_matches('/')).components() {
            match component {
                Component::Normal(part) => relative.push(part),
                Component::CurDir => {}
                // `..`, a root or a prefix inside the request path: refuse outright.
                _ => return None,
            }
        }
        if self.withholds(&relative) {
            return None;
        }
        // `Path::components` drops a trailing `/` or `/.`: such a request names a
        // directory, never a file (as a file system would answer ENOTDIR).
        let names_directory = decoded.ends_with('/') || decoded.ends_with("/.");
        let mut canonical = self.root.join(&relative).canonicalize().ok()?;
        if canonical.is_dir() {
            canonical = canonical.join("index.html").canonicalize().ok()?;
        } else if names_directory {
            return None;
        }
        match canonical.strip_prefix(&self.root) {
            Ok(target) if !self.withholds(target) => {}
            _ => return None,
        }
        let stamp = self.stamp(&canonical);
        self.count_stat();
        let meta = std::fs::metadata(&canonical).ok()?;
        if !meta.is_file() {
            return None;
        }
        let content_type = content_type_for(&canonical);
        let content_type_value = HeaderValue::from_str(&content_type).ok()?;
        let (len, modified) = (meta.len(), meta.modified().ok()?);
        Some(FoundFile {
            len,
            modified,
            resolution: Arc::new(Resolution {
                path: canonical.into(),
                content_type,
                content_type_value,
                versioned: wirefold_http::url_pattern::is_versioned(request_path),
                checked: Mutex::new(Checked {
                    at: Instant::now(),
                    len,
                    modified,
                    // Another name's writes notify another directory.
                    stamp: stamp.filter(|_| meta.nlink() == 1),
                }),
            }),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether a path relative to the root is kept from clients (and from the
    /// scanner): a dotfile, unless `files.serve_dotfiles` is set.
    pub fn withholds(&self, relative: &Path) -> bool {
        !self.serve_dotfiles && is_dotfile_path(relative)
    }

    /// The known versions. Each use is one `get` or `insert`, so a panic elsewhere
    /// cannot leave the map half-updated: a poisoned lock is taken over as it is.
    fn known_versions(&self) -> MutexGuard<'_, HashMap<PathBuf, Arc<FileVersion>>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the content hash of a file version (read here, or by the scanner).
    pub fn remember_hash(
        &self,
        path: &Path,
        len: u64,
        modified: SystemTime,
        hash: Hash,
    ) -> Arc<FileVersion> {
        let version = Arc::new(FileVersion::new(len, modified, hash));
        self.known_versions()
            .insert(path.to_path_buf(), version.clone());
        version
    }

    /// The last known content hash of a file, whatever its version.
    pub fn hash_of(&self, path: &Path) -> Option<Hash> {
        self.known_versions().get(path).map(|v| v.hash)
    }

    /// This exact file version, if it was read before.
    fn known_version(&self, file: &FoundFile) -> Option<Arc<FileVersion>> {
        self.known_versions()
            .get(file.path())
            .filter(|v| v.len == file.len && v.modified == file.modified)
            .cloned()
    }

    /// Reads a file: whole when at most `max_whole` bytes (and then from the store's
    /// copy when this version was seen before), else as a stream handle.
    pub async fn read(
        &self,
        file: &FoundFile,
        max_whole: usize,
        store: Option<&Store>,
    ) -> std::io::Result<FileContent> {
        if file.len > max_whole as u64 {
            return Ok(FileContent::Large(
                tokio::fs::File::open(file.path()).await?,
            ));
        }
        if let (Some(version), Some(store)) = (self.known_version(file), store) {
            if let Some(bytes) = store.get_blob_in_memory(&version.hash) {
                return Ok(FileContent::Whole {
                    bytes,
                    version,
                    from_store: true,
                });
            }
            let (store, hash) = (store.clone(), version.hash);
            let cached = tokio::task::spawn_blocking(move || store.get_blob(&hash)).await;
            if let Ok(Ok(Some(bytes))) = cached {
                return Ok(FileContent::Whole {
                    bytes,
                    version,
                    from_store: true,
                });
            }
        }
        let bytes = Bytes::from(tokio::fs::read(file.path()).await?);
        let (bytes, hash) = delta::blocking::run(move || {
            let hash = Hash::of(&bytes);
            (bytes, hash)
        })
        .await;
        let version = self.remember_hash(file.path(), bytes.len() as u64, file.modified, hash);
        Ok(FileContent::Whole {
            bytes,
            version,
            from_store: false,
        })
    }
}

pub fn content_type_for(path: &Path) -> String {
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let essence = mime.essence_str();
    // Text needs a charset, or browsers guess; the web's text is UTF-8.
    if mime.type_() == "text"
        || essence == "application/javascript"
        || essence == "application/json"
    {
        format!("{essence}; charset=utf-8")
    } else {
        essence.to_string()
    }
}

/// Whether any component of a path relative to the root starts with `.`: `.git/`,
/// `.env`, `.htpasswd` are a deployment's secrets far more often than its content. The
/// top-level `.well-known` directory (RFC 8615) is the exception: it exists to be
/// fetched (ACME challenges, `security.txt`), though a dotfile inside it is not.
pub fn is_dotfile_path(relative: &Path) -> bool {
    relative
        .components()
        .enumerate()
        .any(|(i, component)| match component {
            Component::Normal(name) => {
                name.as_encoded_bytes().starts_with(b".") && !(i == 0 && name == ".well-known")
            }
            _ => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> (tempfile::TempDir, FileSource) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("index.html"), "<p>home</p>").unwrap();
        std::fs::write(root.join("sub/a b.css"), "a{}").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link.txt")).unwrap();
        let src = FileSource::new(&root, false).unwrap();
        (dir, src)
    }

    #[test]
    fn a_modification_time_no_http_date_can_express_gets_no_last_modified() {
        let ten_years = Duration::from_secs(10 * 365 * 86_400);
        let before_1970 = SystemTime::UNIX_EPOCH - ten_years;
        let version = FileVersion::new(3, before_1970, Hash::of(b"abc"));
        assert!(version.last_modified.is_none());
        assert!(version.etag.to_str().unwrap().starts_with('"'));
        let after_9999 = SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_800);
        assert!(http_date(after_9999).is_none());
        let ordinary = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(
            http_date(ordinary).unwrap(),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
    }

    fn stats(src: &FileSource) -> u64 {
        src.stats.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether `resolve` answers without a `stat` (tried thrice: the resolution memo
    /// may expire once between two calls).
    fn trusted(src: &FileSource, resolve: impl Fn() -> FoundFile) -> bool {
        (0..3).any(|_| {
            let before = stats(src);
            resolve();
            stats(src) == before
        })
    }

    #[test]
    fn a_watched_file_is_trusted_until_something_changes_on_its_way() {
        let (dir, src) = site();
        if src.watch.is_none() {
            return eprintln!("skipped: the temporary directory cannot be watched here");
        }
        let root = dir.path().join("root");
        let css = || src.resolve("/sub/a%20b.css", Duration::ZERO).unwrap();
        assert_eq!(css().len, 3);
        assert!(trusted(&src, css));
        // Each change comes after the check has lasted a while (a quiet directory).
        let quiet = || std::thread::sleep(SHORTEST_USEFUL_STAMP + Duration::from_millis(10));
        quiet();
        std::fs::write(root.join("sub/a b.css"), "b{}c").unwrap();
        assert_eq!(css().len, 4, "rewritten in place");
        quiet();
        std::fs::write(root.join("sub/.new"), "c{}cc").unwrap();
        std::fs::rename(root.join("sub/.new"), root.join("sub/a b.css")).unwrap();
        assert_eq!(css().len, 5, "replaced by a rename");
        quiet();
        std::fs::rename(root.join("sub"), root.join("old")).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a b.css"), "d{}ddd").unwrap();
        assert_eq!(css().len, 6, "its directory swapped for another");
        quiet();
        std::fs::write(root.join("sub/a b.css"), "e{}eeee").unwrap();
        assert_eq!(css().len, 7, "written in the directory swapped in");
        assert!(trusted(&src, css), "trusted again");
        // A change right after the check: a busy directory, stat'ed from then on.
        std::fs::write(root.join("sub/log"), "busy").unwrap();
        assert_eq!(css().len, 7);
        assert!(!trusted(&src, css), "a busy directory's file is stat'ed");

        // A file with a second name elsewhere: writes through that name would notify
        // its own directory only, so it is stat'ed per request.
        std::fs::write(root.join("sub/linked.css"), "f{}").unwrap();
        std::fs::hard_link(root.join("sub/linked.css"), root.join("old/twin.css")).unwrap();
        let linked = || src.resolve("/sub/linked.css", Duration::ZERO).unwrap();
        assert_eq!(linked().len, 3);
        assert!(!trusted(&src, linked), "a file with two names is stat'ed");
        std::fs::write(root.join("old/twin.css"), "g{}g").unwrap();
        assert_eq!(linked().len, 4, "written through its other name");
    }

    #[test]
    fn a_change_made_before_a_request_is_always_seen() {
        let (dir, src) = site();
        let root = dir.path().join("root");
        let src = Arc::new(src);
        let published = Arc::new(std::sync::atomic::AtomicU64::new(3));
        let writer = {
            let (root, published) = (root.clone(), published.clone());
            std::thread::spawn(move || {
                for len in 4..400u64 {
                    let staged = root.join("sub/.staged");
                    std::fs::write(&staged, vec![b'x'; len as usize]).unwrap();
                    std::fs::rename(&staged, root.join("sub/a b.css")).unwrap();
                    published.store(len, std::sync::atomic::Ordering::SeqCst);
                }
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (src, published) = (src.clone(), published.clone());
                std::thread::spawn(move || loop {
                    let at_least = published.load(std::sync::atomic::Ordering::SeqCst);
                    let found = src.resolve("/sub/a%20b.css", Duration::ZERO).unwrap();
                    assert!(found.len >= at_least, "{} after {at_least}", found.len);
                    if at_least == 399 {
                        return;
                    }
                })
            })
            .collect();
        writer.join().unwrap();
        for reader in readers {
            reader.join().unwrap();
        }
    }

    #[test]
    fn resolves_files_and_directory_index() {
        let (_d, src) = site();
        assert!(src
            .resolve("/", Duration::ZERO)
            .unwrap()
            .path()
            .ends_with("index.html"));
        let css = src.resolve("/sub/a%20b.css", Duration::ZERO).unwrap();
        assert_eq!(css.resolution.content_type, "text/css; charset=utf-8");
        assert_eq!(css.len, 3);
    }

    #[test]
    fn never_escapes_the_root() {
        let (_d, src) = site();
        for p in [
            "/../secret.txt",
            "/sub/../../secret.txt",
            "/%2e%2e/secret.txt",
            "/%2E%2E%2Fsecret.txt",
            "/sub/%2e%2e/%2e%2e/secret.txt",
            "/link.txt",
            "/..%5csecret.txt",
            "/index.html%00",
            "/missing",
            "/sub",
            "/%ff",
        ] {
            assert!(
                src.resolve(p, Duration::ZERO).is_none(),
                "{p} must not resolve"
            );
        }
    }

    #[test]
    fn dotfiles_are_paths_with_a_dotted_component_outside_well_known() {
        for dotted in [".env", ".git/config", "a/.cache/b", ".well-known/.htpasswd"] {
            assert!(is_dotfile_path(Path::new(dotted)), "{dotted}");
        }
        for plain in [
            "index.html",
            "a/b.c",
            ".well-known/security.txt",
            ".well-known/acme-challenge/t0k3n",
            "",
        ] {
            assert!(!is_dotfile_path(Path::new(plain)), "{plain}");
        }
        assert!(
            is_dotfile_path(Path::new("sub/.well-known/x")),
            "only the top-level .well-known is public"
        );
    }
}
