//! Version corpora as traces: every folder holding numbered files (`001.html`,
//! `003-3.5.0.js`) is one URL, fetched once per version in number order, as in
//! `../shared/corpus`. The URL is the folder's path below the corpus root, prefixed by
//! the root's name; a folder with numbered files of several extensions is one URL
//! per extension. Versions have no client and no time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use wirefold_corpus::series::version_number;
use wirefold_corpus::ContentType;

use super::{Exchange, Item, Location, Skipped, TraceLimits};
use crate::LabError;

pub fn read(root: &Path, limits: TraceLimits) -> Result<impl Iterator<Item = Item>, LabError> {
    let prefix = root
        .file_name()
        .map_or_else(|| ".".to_string(), |n| n.to_string_lossy().into_owned());
    let mut versions = Vec::new();
    walk(root, &prefix, root, &mut versions)?;
    Ok(versions
        .into_iter()
        .map(move |(url, path)| version(url, path, limits.max_body)))
}

fn version(url: String, path: PathBuf, max_body: usize) -> Item {
    let skipped = |reason: String| Skipped {
        file: path.clone(),
        at: Location::File,
        reason,
    };
    let size = std::fs::metadata(&path)
        .map_err(|e| skipped(e.to_string()))?
        .len();
    if size > max_body as u64 {
        return Err(skipped(format!(
            "{size} bytes, over the limit of {max_body} (--max-body-mib)"
        )));
    }
    let body = std::fs::read(&path).map_err(|e| skipped(e.to_string()))?;
    Ok(Exchange {
        url,
        method: None,
        status: 200,
        content_type: ContentType::of(&path).media_type().map(str::to_string),
        client: None,
        time: None,
        body: Some(body),
        revisit_of: None,
    })
}

/// Appends (url, file) for every version under `dir`, folders in name order.
fn walk(
    root: &Path,
    prefix: &str,
    dir: &Path,
    out: &mut Vec<(String, PathBuf)>,
) -> Result<(), LabError> {
    let read_error = |source| LabError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut subdirs = Vec::new();
    // extension -> (version number, path)
    let mut by_ext: BTreeMap<String, Vec<(u64, PathBuf)>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(read_error)? {
        let path = entry.map_err(read_error)?.path();
        if path.is_dir() {
            subdirs.push(path);
            continue;
        }
        let Some(number) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(version_number)
        else {
            continue;
        };
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        by_ext.entry(ext).or_default().push((number, path));
    }
    let relative = dir.strip_prefix(root).unwrap_or(dir);
    let base = if relative.as_os_str().is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}/{}", relative.display())
    };
    let several = by_ext.len() > 1;
    for (ext, mut files) in by_ext {
        files.sort();
        let url = if several {
            format!("{base} (.{ext})")
        } else {
            base.clone()
        };
        out.extend(files.into_iter().map(|(_, path)| (url.clone(), path)));
    }
    subdirs.sort();
    for sub in subdirs {
        walk(root, prefix, &sub, out)?;
    }
    Ok(())
}
