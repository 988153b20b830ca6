//! Version series on disk: a folder whose files are numbered versions of one resource.
//!
//! Both corpus layouts name versions by a leading number: `NNN.ext` (`html/`, `assets/`)
//! and `NNN-<version>.ext` (the npm series of `fetch-npm.sh`). Files are ordered by that
//! number; files without one (`MANIFEST.tsv`, notes) are ignored. A folder holding
//! numbered files of several extensions makes one series per extension.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::{ContentType, ReadError};

/// One resource's versions, oldest first.
#[derive(Clone, Debug)]
pub struct Series {
    /// The folder relative to the corpus root (`.` for the root itself), plus the
    /// extension when the folder holds several series.
    pub name: String,
    pub content_type: ContentType,
    pub versions: Vec<PathBuf>,
}

/// Every series with at least two versions under `root`, sorted by name.
pub fn find(root: &Path) -> Result<Vec<Series>, ReadError> {
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Series>) -> Result<(), ReadError> {
    let read_error = |source| ReadError {
        path: dir.to_path_buf(),
        source,
    };
    let mut subdirs = Vec::new();
    // extension -> (version number, file name, path)
    let mut by_ext: BTreeMap<String, Vec<(u64, String, PathBuf)>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(read_error)? {
        let path = entry.map_err(read_error)?.path();
        let metadata = std::fs::metadata(&path).map_err(|source| ReadError {
            path: path.clone(),
            source,
        })?;
        if metadata.is_dir() {
            subdirs.push(path);
            continue;
        }
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(number) = version_number(name) else {
            continue;
        };
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        by_ext
            .entry(ext)
            .or_default()
            .push((number, name.to_string(), path));
    }
    let relative = dir
        .strip_prefix(root)
        .ok()
        .filter(|r| !r.as_os_str().is_empty())
        .map_or_else(|| ".".to_string(), |r| r.display().to_string());
    let several = by_ext.values().filter(|v| v.len() >= 2).count() > 1;
    for (ext, mut files) in by_ext {
        if files.len() < 2 {
            continue;
        }
        files.sort();
        let name = if several {
            format!("{relative} (.{ext})")
        } else {
            relative.clone()
        };
        out.push(Series {
            name,
            content_type: ContentType::of(&files[0].2),
            versions: files.into_iter().map(|(_, _, p)| p).collect(),
        });
    }
    subdirs.sort();
    for sub in subdirs {
        walk(root, &sub, out)?;
    }
    Ok(())
}

/// The leading decimal number of a version file's name (`007.html`, `003-3.5.0.js`).
pub fn version_number(name: &str) -> Option<u64> {
    let digits = name.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let rest = &name[digits..];
    if !(rest.starts_with('.') || rest.starts_with('-') || rest.is_empty()) {
        return None;
    }
    name[..digits].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_numbers() {
        assert_eq!(version_number("007.html"), Some(7));
        assert_eq!(version_number("012-3.7.1.js"), Some(12));
        assert_eq!(version_number("MANIFEST.tsv"), None);
        assert_eq!(version_number("404page.html"), None);
    }

    #[test]
    fn both_layouts_sort_by_number() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("html/repo/page-html");
        let npm = dir.path().join("npm/jquery/dist_jquery-js");
        std::fs::create_dir_all(&plain).unwrap();
        std::fs::create_dir_all(&npm).unwrap();
        for n in ["001.html", "002.html", "010.html", "MANIFEST.tsv"] {
            std::fs::write(plain.join(n), n).unwrap();
        }
        for n in ["002-3.10.0.js", "001-3.9.0.js", "010-4.0.0.js"] {
            std::fs::write(npm.join(n), n).unwrap();
        }
        // A lone version is no series.
        std::fs::create_dir_all(dir.path().join("single")).unwrap();
        std::fs::write(dir.path().join("single/001.css"), "x").unwrap();

        let series = find(dir.path()).unwrap();
        let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["html/repo/page-html", "npm/jquery/dist_jquery-js"]);
        let files = |s: &Series| -> Vec<String> {
            s.versions
                .iter()
                .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(files(&series[0]), ["001.html", "002.html", "010.html"]);
        assert_eq!(
            files(&series[1]),
            ["001-3.9.0.js", "002-3.10.0.js", "010-4.0.0.js"]
        );
        assert_eq!(series[1].content_type, ContentType::Js);
    }
}
