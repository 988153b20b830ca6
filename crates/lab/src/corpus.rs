//! The files an analysis reads: every file under its arguments, with its content type.

use std::path::{Path, PathBuf};

use wirefold_corpus::ContentType;

use crate::LabError;

/// One file to analyse.
#[derive(Clone, Debug)]
pub struct CorpusFile {
    pub path: PathBuf,
    pub content_type: ContentType,
}

impl CorpusFile {
    pub fn read(&self) -> Result<Vec<u8>, LabError> {
        std::fs::read(&self.path).map_err(|source| LabError::Read {
            path: self.path.clone(),
            source,
        })
    }
}

/// Every regular file under `roots` (directories are walked recursively, a file
/// stands for itself), sorted by path so runs are reproducible.
pub fn list_files(roots: &[PathBuf]) -> Result<Vec<CorpusFile>, LabError> {
    let mut paths = Vec::new();
    for root in roots {
        collect(root, &mut paths)?;
    }
    if paths.is_empty() {
        return Err(LabError::NoInput(roots.to_vec()));
    }
    paths.sort();
    Ok(paths
        .into_iter()
        .map(|path| CorpusFile {
            content_type: ContentType::of(&path),
            path,
        })
        .collect())
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), LabError> {
    let read_error = |source| LabError::Read {
        path: path.to_path_buf(),
        source,
    };
    let metadata = std::fs::metadata(path).map_err(read_error)?;
    if !metadata.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    for entry in std::fs::read_dir(path).map_err(read_error)? {
        collect(&entry.map_err(read_error)?.path(), out)?;
    }
    Ok(())
}
