//! Change notification for the file source (`--root`): an inotify watch on each
//! directory from the root down to every file served. While none of them reports a
//! change, a file's size and modification time as last read still hold, so a
//! request checks the notifications (one non-blocking `read`) instead of `stat`ting
//! the file (a walk of its whole path).
//!
//! Exact for every change made through the names under the root: the kernel queues a
//! notification before the write, rename or unlink that makes it returns, and a
//! request reads the queue before it trusts anything. Only local file systems are
//! watched (on NFS, FUSE and the like, changes made elsewhere send none); there, past
//! [`MAX_WATCHED`] directories or the kernel's watch limit, and without inotify, the
//! file source `stat`s per request as before. A file with more than one name (hard
//! links) is never trusted this way: a write through another name notifies that
//! name's directory only. What sends no notification at all (a write through a
//! shared mapping, a link made to a file after it was checked, a symlink on the
//! request's path retargeted, a directory above the root swapped, a file system
//! mounted on the way) is found when the path is walked again, within the file
//! source's resolution memo's lifetime (one second).

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustix::fd::OwnedFd;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

/// Directories watched at most (each holds a little kernel memory).
pub const MAX_WATCHED: usize = 4096;

/// What may change a file's bytes, size or modification time, or which file a name
/// leads to: in a directory, or to the directory itself.
const CHANGES: WatchFlags = WatchFlags::MODIFY
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::CREATE)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR);

/// File systems whose every change passes through this kernel (`statfs` types):
/// ext2/3/4, XFS, Btrfs, tmpfs, F2FS, overlayfs (a container's own layer).
const LOCAL_FILE_SYSTEMS: [u32; 6] = [
    0xEF53,
    0x5846_5342,
    0x9123_683E,
    0x0102_1994,
    0xF2F5_2010,
    0x794C_7630,
];

/// A watch's count once the watch has ended (its directory was removed).
const ENDED: u64 = u64::MAX;

/// While at the cap, unused watches are looked for at most this often (a scan of all).
const RELEASE_INTERVAL: Duration = Duration::from_secs(1);

/// The watches of one file source.
pub struct DirWatch {
    /// The file source's root (canonical): where every stamp's directories begin.
    root: PathBuf,
    inotify: OwnedFd,
    watched: Mutex<Watched>,
}

#[derive(Default)]
struct Watched {
    by_descriptor: HashMap<i32, Arc<Dir>>,
    /// Times notifications were lost (the kernel's queue overflowed, or reading it
    /// failed): every stamp taken before is void.
    losses: u64,
    /// When unused watches were last looked for and too few found.
    full_since: Option<Instant>,
}

/// One watched directory.
struct Dir {
    /// Changes reported in it (or to it) so far; [`ENDED`] once its watch ended.
    changes: AtomicU64,
}

/// The state of a file's directories taken before its metadata was read: while it
/// holds, that metadata does.
pub struct Stamp {
    dirs: Vec<(Arc<Dir>, u64)>,
    losses: u64,
}

impl DirWatch {
    /// `None` when `root` is on a file system whose changes may come from elsewhere,
    /// or the kernel offers no inotify instance (none built in, or the per-user limit
    /// reached).
    pub fn new(root: &Path) -> Option<DirWatch> {
        if !is_local(root) {
            return None;
        }
        let inotify = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        Some(DirWatch {
            root: root.to_path_buf(),
            inotify,
            watched: Mutex::default(),
        })
    }

    /// The stamp of the directories from the root down to `file`'s parent (`file`
    /// canonical), to be taken before `file`'s metadata is read. `None` when one of
    /// them cannot be watched, or `file` is not under the root.
    ///
    /// Each directory is watched by its path now (the kernel answers with the watch
    /// the directory at that path already has): a name that led elsewhere before
    /// gets the watch of what it leads to. A change made after the queue is read
    /// here, renames on the way included, is counted after this stamp and voids it.
    pub fn stamp(&self, file: &Path) -> Option<Stamp> {
        let below_root = file.parent()?.strip_prefix(&self.root).ok()?;
        let mut watched = self.drained();
        let mut dir = self.root.clone();
        let mut dirs = vec![self.watch(&mut watched, &dir)?];
        for name in below_root.components() {
            dir.push(name);
            dirs.push(self.watch(&mut watched, &dir)?);
        }
        let dirs = dirs
            .into_iter()
            .map(|d| {
                let seen = d.changes.load(Ordering::Relaxed);
                (d, seen)
            })
            .collect();
        let losses = watched.losses;
        Some(Stamp { dirs, losses })
    }

    /// Whether nothing changed in the stamp's directories since it was taken.
    pub fn unchanged(&self, stamp: &Stamp) -> bool {
        let watched = self.drained();
        watched.losses == stamp.losses
            && stamp
                .dirs
                .iter()
                .all(|(dir, seen)| dir.changes.load(Ordering::Relaxed) == *seen)
    }

    /// Directories watched now.
    #[cfg(test)]
    pub fn watching(&self) -> usize {
        self.drained().by_descriptor.len()
    }

    fn watch(&self, watched: &mut Watched, dir: &Path) -> Option<Arc<Dir>> {
        let descriptor = inotify::add_watch(&self.inotify, dir, CHANGES).ok()?;
        if let Some(known) = watched.by_descriptor.get(&descriptor) {
            return Some(known.clone());
        }
        let due = |since: Instant| since.elapsed() >= RELEASE_INTERVAL;
        if watched.by_descriptor.len() >= MAX_WATCHED && watched.full_since.is_none_or(due) {
            self.release_unused(watched);
            watched.full_since = (watched.by_descriptor.len() >= MAX_WATCHED).then(Instant::now);
        }
        if watched.by_descriptor.len() >= MAX_WATCHED || !is_local(dir) {
            let _ = inotify::remove_watch(&self.inotify, descriptor);
            return None;
        }
        let new = Arc::new(Dir {
            changes: AtomicU64::new(0),
        });
        watched.by_descriptor.insert(descriptor, new.clone());
        Some(new)
    }

    /// Ends the watches no stamp refers to: directories whose files' resolutions are
    /// all gone from the file source's memo.
    fn release_unused(&self, watched: &mut Watched) {
        watched.by_descriptor.retain(|&descriptor, dir| {
            let used = Arc::strong_count(dir) > 1;
            if !used {
                let _ = inotify::remove_watch(&self.inotify, descriptor);
            }
            used
        });
    }

    /// The watches, with every notification queued so far counted. Held while a
    /// request reads and counts them, so that no other request can find the queue
    /// empty before a change taken from it is counted.
    fn drained(&self) -> MutexGuard<'_, Watched> {
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        let mut buffer = [MaybeUninit::uninit(); 4096];
        let mut queue = inotify::Reader::new(&self.inotify, &mut buffer);
        let mut moved = Vec::new();
        loop {
            match queue.next() {
                Ok(event) => {
                    if watched.count(event.wd(), event.events()) {
                        moved.push(event.wd());
                    }
                }
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR) => continue,
                Err(_) => {
                    watched.losses += 1;
                    break;
                }
            }
        }
        // A directory moved or removed is no longer where a stamp found it: its watch
        // ends (a directory that comes back to a path is watched afresh).
        for descriptor in moved {
            if let Some(ended) = watched.by_descriptor.remove(&descriptor) {
                ended.changes.store(ENDED, Ordering::Relaxed);
                let _ = inotify::remove_watch(&self.inotify, descriptor);
            }
        }
        watched
    }
}

impl Watched {
    /// Counts one notification; true when its directory itself moved or went.
    fn count(&mut self, descriptor: i32, events: ReadFlags) -> bool {
        if events.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.losses += 1;
            return false;
        }
        let Some(dir) = self.by_descriptor.get(&descriptor) else {
            return false;
        };
        dir.changes.fetch_add(1, Ordering::Relaxed);
        events.intersects(ReadFlags::MOVE_SELF | ReadFlags::DELETE_SELF | ReadFlags::IGNORED)
    }
}

fn is_local(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|fs| {
        // The type is a 32-bit magic number in a word of the platform's width.
        #[allow(clippy::cast_possible_truncation, clippy::unnecessary_cast)]
        let kind = fs.f_type as u32;
        LOCAL_FILE_SYSTEMS.contains(&kind)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::PathBuf;

    /// A watch of a temporary root with `sub/page.html`; `None` (the test is skipped)
    /// where the temporary directory is on a file system the watch cannot vouch for.
    fn watch_in(dir: &Path) -> Option<(DirWatch, PathBuf, PathBuf)> {
        let root = dir.canonicalize().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        let file = root.join("sub/page.html");
        std::fs::write(&file, "one").unwrap();
        let Some(watch) = DirWatch::new(&root) else {
            eprintln!("skipped: the temporary directory cannot be watched here");
            return None;
        };
        Some((watch, root, file))
    }

    #[test]
    fn every_change_on_the_way_to_a_file_voids_its_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let Some((watch, root, file)) = watch_in(dir.path()) else {
            return;
        };
        let stamp = |watch: &DirWatch| watch.stamp(&file).unwrap();
        let first = stamp(&watch);
        assert!(watch.unchanged(&first));
        assert_eq!(watch.watching(), 2);
        std::fs::write(&file, "two").unwrap();
        assert!(!watch.unchanged(&first));
        // Replaced by a rename, as a deploy does.
        let second = stamp(&watch);
        std::fs::write(root.join("sub/.new"), "three").unwrap();
        let third = stamp(&watch);
        std::fs::rename(root.join("sub/.new"), &file).unwrap();
        assert!(!watch.unchanged(&second) && !watch.unchanged(&third));
        // A directory above it swapped for another.
        let fourth = stamp(&watch);
        std::fs::rename(root.join("sub"), root.join("old")).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(&file, "four").unwrap();
        assert!(!watch.unchanged(&fourth));
        // The new directory is watched in its turn; the old one no longer (it moved).
        let fifth = stamp(&watch);
        assert!(watch.unchanged(&fifth));
        assert_eq!(watch.watching(), 2);
        std::fs::remove_file(&file).unwrap();
        assert!(!watch.unchanged(&fifth));
        // Anything else in a directory on the way counts too (conservatively).
        let sixth = stamp(&watch);
        std::fs::remove_dir_all(root.join("old")).unwrap();
        assert!(!watch.unchanged(&sixth));
    }

    #[test]
    fn a_removed_directory_made_again_is_watched_again() {
        let dir = tempfile::tempdir().unwrap();
        let Some((watch, root, file)) = watch_in(dir.path()) else {
            return;
        };
        let before = watch.stamp(&file).unwrap();
        std::fs::remove_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(&file, "again").unwrap();
        assert!(!watch.unchanged(&before));
        let after = watch.stamp(&file).unwrap();
        assert!(watch.unchanged(&after));
        std::fs::write(&file, "and again").unwrap();
        assert!(!watch.unchanged(&after));
    }

    #[test]
    fn at_the_cap_watches_no_stamp_uses_are_ended_first() {
        let dir = tempfile::tempdir().unwrap();
        let Some((watch, root, file)) = watch_in(dir.path()) else {
            return;
        };
        std::fs::create_dir(root.join("more")).unwrap();
        std::fs::write(root.join("more/x"), "x").unwrap();
        let held = watch.stamp(&file).unwrap();
        let mut watched = watch.drained();
        for i in 0..MAX_WATCHED - 2 {
            let unused = Arc::new(Dir {
                changes: AtomicU64::new(0),
            });
            watched.by_descriptor.insert(-1 - i as i32, unused);
        }
        drop(watched);
        let more = watch.stamp(&root.join("more/x")).unwrap();
        // The held stamp's two directories and the new one are all that is left.
        assert_eq!(watch.watching(), 3);
        assert!(watch.unchanged(&held) && watch.unchanged(&more));
    }

    #[test]
    fn a_file_outside_the_root_gets_no_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let Some((watch, _, _)) = watch_in(dir.path()) else {
            return;
        };
        let elsewhere = tempfile::tempdir().unwrap();
        let outside = elsewhere.path().canonicalize().unwrap().join("x");
        assert!(watch.stamp(&outside).is_none());
    }
}
