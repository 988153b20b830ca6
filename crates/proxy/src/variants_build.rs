//! `wirefold variants build DIR`: makes the variants of every file of a `--root`
//! site ahead of any request, into the store a later `wirefold serve --root DIR`
//! opens (same `data_dir`, same layout), so its first clients get variants rather
//! than originals while the background maker catches up.
//!
//! One file at a time, on the calling thread: an offline command, not bounded by
//! `fidelity.cpu_share`. A file whose ladder the store already has is not made
//! again; a file that cannot be read is skipped and reported.

use std::path::{Path, PathBuf};

use store::{Hash, Store};

use crate::config::Config;
use crate::files::{content_type_for, FileSource};
use crate::variants::{self, OriginalKind};

/// What the build reports as it goes, for a progress display.
pub enum Progress<'a> {
    /// The files that may have variants, before any is made.
    Found(usize),
    /// One file is done (made, already kept, or skipped).
    File(&'a Path),
    /// A file was skipped, and why.
    Skipped(&'a Path, &'a str),
}

/// What a build did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Files that may have variants (images, and HTML, CSS and JavaScript in a
    /// build with minifiers).
    pub files: usize,
    /// Files whose variants were made now, or found made by an earlier build.
    pub done: usize,
    /// Variants kept (made now).
    pub variants: usize,
    /// Bytes the smallest variant of each file saves against it, before
    /// compression, summed (made now).
    pub bytes_saved: u64,
    /// Files that could not be read or kept.
    pub skipped: usize,
}

/// Why a build could not start.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{}: {source}", root.display())]
    Root {
        root: PathBuf,
        source: std::io::Error,
    },
    #[error("store {location}: {source}")]
    Store {
        location: String,
        source: store::StoreError,
    },
    #[error("{0}")]
    Target(#[from] store::TargetError),
    #[error("fidelity.enabled is false: no variants to make")]
    Disabled,
}

/// Makes the variants of every file under `root` into the store `config` names
/// (`data_dir`, or `store`), reporting progress to `progress`.
pub fn build(
    root: &Path,
    config: &Config,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Report, BuildError> {
    if !config.fidelity.enabled {
        return Err(BuildError::Disabled);
    }
    let root_error = |source| BuildError::Root {
        root: root.to_path_buf(),
        source,
    };
    if !std::fs::metadata(root).map_err(root_error)?.is_dir() {
        return Err(root_error(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "not a directory",
        )));
    }
    let files = FileSource::new(root, config.files.serve_dotfiles).map_err(root_error)?;
    let location = config.store_location()?;
    let store_config = store::StoreConfig {
        max_bytes: config.cache.max_bytes,
        memory_bytes: config.cache.memory_bytes,
        max_object_bytes: config.limits.max_buffered_body as u64,
    };
    let store =
        Store::open_at(&location, store_config, None).map_err(|source| BuildError::Store {
            location: location.to_string(),
            source,
        })?;

    let mut found = Vec::new();
    crate::scan::walk(&files, files.root(), &mut found);
    let mut candidates: Vec<(PathBuf, String)> = found
        .into_iter()
        .filter(|(_, len, _)| *len <= config.limits.max_buffered_body as u64)
        .filter_map(|(path, _, _)| {
            let content_type = content_type_for(&path);
            let wanted = match OriginalKind::of(&content_type)? {
                OriginalKind::Image(_) => true,
                OriginalKind::Text(_) => fidelity::text::MINIFIERS,
            };
            wanted.then_some((path, content_type))
        })
        .collect();
    candidates.sort();
    progress(Progress::Found(candidates.len()));

    let mut report = Report {
        files: candidates.len(),
        ..Report::default()
    };
    for (path, content_type) in &candidates {
        match build_one(&store, config, path, content_type) {
            Ok(Some(made)) => {
                report.done += 1;
                report.variants += made.0;
                report.bytes_saved += made.1;
            }
            Ok(None) => report.done += 1,
            Err(e) => {
                report.skipped += 1;
                progress(Progress::Skipped(path, &e));
            }
        }
        progress(Progress::File(path));
    }
    Ok(report)
}

/// One file: `None` when its whole ladder was already kept, else (variants made,
/// bytes the smallest saves). Runs every pass, the later ones too (AVIF).
fn build_one(
    store: &Store,
    config: &Config,
    path: &Path,
    content_type: &str,
) -> Result<Option<(usize, u64)>, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let hash = Hash::of(&bytes);
    let mut so_far = variants::kept_ladder(store, &hash).map_err(|e| e.to_string())?;
    if so_far.as_ref().is_some_and(|l| l.later.is_empty()) {
        return Ok(None);
    }
    store.put_blob(&bytes).map_err(|e| e.to_string())?;
    let compression = &config.compression;
    let codings = compression
        .profile_for(content_type)
        .filter(|_| compression.enabled)
        .map_or(&[][..], |p| p.cached.0.as_slice());
    let original = variants::Original {
        store: store.clone(),
        hash,
        bytes: bytes.into(),
        content_type: content_type.to_string(),
        config: config.fidelity.clone(),
        codings: codings.to_vec(),
    };
    let mut made_rungs = 0;
    loop {
        let made =
            variants::make_and_keep(&original, so_far.as_ref()).map_err(|e| e.to_string())?;
        made_rungs += made.new_rungs;
        if made.ladder.later.is_empty() {
            return Ok(Some((
                made_rungs,
                made.bytes_saved(original.bytes.len() as u64),
            )));
        }
        so_far = Some(made.ladder);
    }
}
