//! Root mode: notices changed files and makes what their first request would need —
//! the encodings at the `cached` levels and the deltas against earlier versions (the
//! file's own history, and older files of the same versioned name) — before anyone
//! asks, so the first request after a deploy pays no encoding time.
//!
//! A polling scan (every `delta.scan_interval_ms`) rather than file-system events:
//! portable, bounded, and a deploy is rarely faster than the interval.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use codec::dictionary::DictionaryCoding;
use store::{Hash, Store};
use tokio::sync::watch;

use crate::files::FileSource;
use crate::pipeline::fetch::Source;
use crate::pipeline::Pipeline;
use delta::derived::Variant;
use delta::{self, dictionaries, history};

/// Files visited per scan at most: a bound on the work a huge tree can cause.
const MAX_FILES: usize = 100_000;
/// Earlier versions (own history, then versioned siblings) deltas are made against.
const BASES: usize = 2;

/// Starts the scanner when the pipeline serves files, has a store, and scanning is on.
pub fn start(pipeline: Arc<Pipeline>, mut stop: watch::Receiver<bool>) {
    let interval = pipeline.config().delta.scan_interval_ms;
    if interval == 0
        || !pipeline.config().delta.enabled
        || pipeline.store().is_none()
        || !matches!(pipeline.fetcher.source(), Source::Files(_))
    {
        return;
    }
    let background = pipeline.background.clone();
    background.spawn(async move {
        let mut seen: HashMap<PathBuf, (u64, SystemTime)> = HashMap::new();
        loop {
            let p = pipeline.clone();
            let mut snapshot = std::mem::take(&mut seen);
            let scanned = tokio::task::spawn_blocking(move || {
                scan(&p, &mut snapshot);
                snapshot
            })
            .await;
            match scanned {
                Ok(s) => {
                    seen = s;
                    pipeline.metrics.root_scans.inc();
                }
                Err(e) => tracing::error!(error = %e, "root scan failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(interval)) => {}
                _ = stop.changed() => return,
            }
        }
    });
}

/// One pass: every text file whose size or modification time changed is processed.
fn scan(p: &Pipeline, seen: &mut HashMap<PathBuf, (u64, SystemTime)>) {
    let (Source::Files(files), Some(store)) = (p.fetcher.source(), p.store()) else {
        return;
    };
    let mut found = Vec::new();
    walk(files, files.root(), &mut found);
    // Versioned names grouped by pattern, newest last, for sibling dictionaries.
    let mut groups: HashMap<String, Vec<(SystemTime, PathBuf)>> = HashMap::new();
    for (path, _, modified) in &found {
        let request_path = request_path(files.root(), path);
        if wirefold_http::url_pattern::is_versioned(&request_path) {
            let pattern = dictionaries::pattern_for(&p.config().delta, &request_path, None);
            groups
                .entry(pattern)
                .or_default()
                .push((*modified, path.clone()));
        }
    }
    groups.values_mut().for_each(|g| g.sort());
    for (path, len, modified) in found {
        if seen.get(&path) == Some(&(len, modified))
            || len > p.config().limits.max_buffered_body as u64
        {
            continue;
        }
        let request_path = request_path(files.root(), &path);
        let content_type = crate::files::content_type_for(&path);
        let config = p.config();
        let Some(profile) = config.compression.profile_for(&content_type) else {
            seen.insert(path, (len, modified));
            continue;
        };
        let siblings: Vec<PathBuf> = groups
            .get(&dictionaries::pattern_for(
                &p.config().delta,
                &request_path,
                None,
            ))
            .map(|g| {
                g.iter()
                    .filter(|(m, other)| *m <= modified && *other != path)
                    .rev()
                    .take(BASES)
                    .map(|(_, o)| o.clone())
                    .collect()
            })
            .unwrap_or_default();
        match prepare(
            p,
            files,
            store,
            &path,
            &request_path,
            len,
            modified,
            &profile.cached.0,
            &siblings,
        ) {
            Ok(()) => {
                seen.insert(path, (len, modified));
            }
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "precompute failed"),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn prepare(
    p: &Pipeline,
    files: &FileSource,
    store: &Store,
    path: &Path,
    request_path: &str,
    len: u64,
    modified: SystemTime,
    cached: &[(wirefold_http::ContentCoding, u32)],
    siblings: &[PathBuf],
) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    if bytes.len() as u64 != len {
        return Ok(()); // changing under us: the next scan sees it settled
    }
    let hash = store.put_blob(&bytes).map_err(|e| e.to_string())?;
    files.remember_hash(path, len, modified, hash);
    let resource = format!("root{request_path}");
    let etag = format!("\"{}\"", crate::model::content_etag(&hash));
    let version = history::Version {
        hash: hash.to_hex(),
        etag: Some(etag),
        time: delta::now_unix(),
        size: len,
    };
    delta::record_version(store, &p.config().delta, &resource, version)
        .map_err(|e| e.to_string())?;

    let make = |variant: Variant, produce: &dyn Fn() -> Vec<u8>| -> Result<(), String> {
        let variant = variant.to_string();
        if store
            .get_encoding(&hash, &variant)
            .map_err(|e| e.to_string())?
            .is_none()
        {
            store
                .put_encoding(&hash, &variant, &produce())
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    for &(coding, level) in cached {
        make(Variant::Coded { coding, level }, &|| {
            codec::compress(coding, level, &bytes)
        })?;
    }
    let config = p.config();
    let config = &config.delta;
    let own_bases = history::load(store, &resource)
        .map_err(|e| e.to_string())?
        .versions
        .iter()
        .skip(1)
        .filter_map(history::Version::hash)
        .take(BASES)
        .collect::<Vec<Hash>>();
    let sibling_bases = siblings.iter().filter_map(|s| files.hash_of(s));
    for (i, base) in own_bases.iter().copied().chain(sibling_bases).enumerate() {
        let Some(base_bytes) = store.get_blob(&base).map_err(|e| e.to_string())? else {
            continue;
        };
        if config.vcdiff && i < own_bases.len() {
            make(Variant::Vcdiff { base }, &|| {
                codec::vcdiff::encode(&base_bytes, &bytes)
            })?;
        }
        if config.dictionaries {
            for coding in [DictionaryCoding::Dcz, DictionaryCoding::Dcb] {
                let (_, level) = delta::dictionary_levels(coding);
                let variant = Variant::DictionaryCoded {
                    coding,
                    dictionary: base,
                    level,
                };
                make(variant, &|| {
                    codec::dictionary::encode(coding, level, &base_bytes, &bytes)
                })?;
            }
        }
    }
    Ok(())
}

/// Regular files under `dir` (symlinks are not followed: the file source refuses
/// what leads out of the root anyway), with size and modification time; what the
/// file source withholds (dotfiles) is skipped, so it is neither read nor stored.
pub(crate) fn walk(files: &FileSource, dir: &Path, out: &mut Vec<(PathBuf, u64, SystemTime)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if out.len() >= MAX_FILES {
            return;
        }
        let path = entry.path();
        if files.withholds(path.strip_prefix(files.root()).unwrap_or(&path)) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            walk(files, &path, out);
        } else if meta.is_file() {
            if let Ok(modified) = meta.modified() {
                out.push((path, meta.len(), modified));
            }
        }
    }
}

/// The URL path of a file, percent-encoded the way browsers write it.
fn request_path(root: &Path, path: &Path) -> String {
    const PATH: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
        .add(b' ')
        .add(b'"')
        .add(b'#')
        .add(b'<')
        .add(b'>')
        .add(b'?')
        .add(b'`')
        .add(b'{')
        .add(b'}')
        .add(b'%');
    let relative = path.strip_prefix(root).unwrap_or(path);
    let mut out = String::new();
    for part in relative.components() {
        out.push('/');
        out.push_str(
            &percent_encoding::utf8_percent_encode(&part.as_os_str().to_string_lossy(), PATH)
                .to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_skips_dotfiles_unless_they_are_served() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join(".well-known")).unwrap();
        for file in [
            ".env",
            ".git/config",
            ".well-known/security.txt",
            "page.html",
        ] {
            std::fs::write(root.join(file), "x").unwrap();
        }
        let walked = |serve_dotfiles| {
            let files = FileSource::new(root, serve_dotfiles).unwrap();
            let mut found = Vec::new();
            walk(&files, files.root(), &mut found);
            let mut names: Vec<String> = found
                .iter()
                .map(|(path, ..)| request_path(files.root(), path))
                .collect();
            names.sort();
            names
        };
        assert_eq!(walked(false), ["/.well-known/security.txt", "/page.html"]);
        assert_eq!(walked(true).len(), 4);
    }
}
