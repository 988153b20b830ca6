//! Version corpora on disk: finding the files and telling their content type.

use std::path::{Path, PathBuf};

use crate::LabError;

/// The content types the lab reports separately, told by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContentType {
    Html,
    Css,
    Js,
    Json,
    Svg,
    Other,
}

impl ContentType {
    pub fn of(path: &Path) -> Self {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        match ext.as_str() {
            "html" | "htm" | "xhtml" => Self::Html,
            "css" => Self::Css,
            "js" | "mjs" | "cjs" => Self::Js,
            "json" => Self::Json,
            "svg" => Self::Svg,
            _ => Self::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Html => "html",
            Self::Css => "css",
            Self::Js => "js",
            Self::Json => "json",
            Self::Svg => "svg",
            Self::Other => "other",
        }
    }

    /// The media type a web server would send for this content type.
    pub fn media_type(self) -> Option<&'static str> {
        match self {
            Self::Html => Some("text/html"),
            Self::Css => Some("text/css"),
            Self::Js => Some("text/javascript"),
            Self::Json => Some("application/json"),
            Self::Svg => Some("image/svg+xml"),
            Self::Other => None,
        }
    }
}

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
