//! HTML documents with their inline resources: pages in a folder, sized from the files
//! beside them, or the HTML responses of a HAR or WARC trace, sized from the trace's
//! responses; an assumed size where neither has the resource. Shared by `lab aid` and
//! `lab estimate --dir`.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use url::Url;
use wirefold_corpus::ContentType;

use crate::corpus;
use crate::trace::{self, Exchange, TraceLimits};
use crate::LabError;

/// Bounds for reading traces (the defaults of `lab savings`).
const TRACE_LIMITS: TraceLimits = TraceLimits {
    max_body: 64 << 20,
    max_har: 1 << 30,
};

/// Where the documents' URLs come from and what an unknown resource weighs.
#[derive(Clone, Debug, clap::Args)]
pub struct SiteArgs {
    /// The URL each input folder is served at: a document's URL is this joined with its
    /// path in the folder, and a reference under it is looked up as a file in the folder.
    #[arg(long, value_name = "URL", default_value = "file:///", value_parser = parse_base_url)]
    pub base_url: Url,
    /// Bytes assumed for an inline resource that is not found on disk.
    #[arg(long, value_name = "BYTES", default_value_t = 20_000)]
    pub default_resource_bytes: u64,
}

fn parse_base_url(s: &str) -> Result<Url, String> {
    let url = Url::parse(s).map_err(|e| format!("{s}: {e} (expected an absolute URL)"))?;
    if url.cannot_be_a_base() {
        return Err(format!(
            "{s}: cannot hold paths (expected e.g. https://example.com/)"
        ));
    }
    Ok(url)
}

/// A page and what it makes the browser fetch.
#[derive(Clone, Debug)]
pub struct Document {
    pub url: String,
    pub page_bytes: u64,
    /// Distinct inline resources, in the order of their first reference.
    pub resources: Vec<Resource>,
}

#[derive(Clone, Debug)]
pub struct Resource {
    /// Byte offset of the start tag of the resource's first reference.
    pub offset: u64,
    /// Byte offset just past that start tag.
    pub tag_end: u64,
    pub bytes: u64,
    /// Whether `bytes` was found (on disk or in the trace) rather than assumed.
    pub size_known: bool,
}

impl Document {
    pub fn bytes_total(&self) -> u64 {
        self.page_bytes + self.resources.iter().map(|r| r.bytes).sum::<u64>()
    }

    /// Where the last inline reference (of a resource not referenced before) starts.
    pub fn last_ref_offset(&self) -> Option<u64> {
        self.resources.iter().map(|r| r.offset).max()
    }

    pub fn resources_assumed(&self) -> usize {
        self.resources.iter().filter(|r| !r.size_known).count()
    }
}

/// Every HTML document of `inputs`: folders are walked recursively (documents sorted
/// by path), an HTML file stands for itself, served from its folder, and any other file
/// is read as a HAR or WARC trace (its status-200 `text/html` responses with a body).
pub fn load(inputs: &[PathBuf], site: &SiteArgs) -> Result<Vec<Document>, LabError> {
    let mut documents = Vec::new();
    for input in inputs {
        let metadata = std::fs::metadata(input).map_err(|source| LabError::Read {
            path: input.clone(),
            source,
        })?;
        let root = if metadata.is_dir() {
            input.as_path()
        } else if ContentType::of(input) == ContentType::Html {
            input.parent().unwrap_or(Path::new("."))
        } else {
            from_trace(input, site, &mut documents)?;
            continue;
        };
        for file in corpus::list_files(std::slice::from_ref(input))? {
            if file.content_type == ContentType::Html {
                let url = page_url(root, &file.path, &site.base_url);
                let size_on_disk = |url: &str| {
                    let path = local_file(root, &site.base_url, url)?;
                    std::fs::metadata(path)
                        .ok()
                        .filter(|m| m.is_file())
                        .map(|m| m.len())
                };
                documents.push(document(url, &file.read()?, site, size_on_disk));
            }
        }
    }
    if documents.is_empty() {
        return Err(LabError::NoInput(inputs.to_vec()));
    }
    Ok(documents)
}

/// Two passes over the trace, so that memory holds one response at a time: the first
/// learns every response's size, the second reads the HTML pages.
fn from_trace(path: &Path, site: &SiteArgs, documents: &mut Vec<Document>) -> Result<(), LabError> {
    let mut sizes = HashMap::new();
    for exchange in exchanges(path, true)? {
        if let Some(body) = &exchange.body {
            sizes
                .entry(normalized(&exchange.url))
                .or_insert(body.len() as u64);
        }
    }
    for exchange in exchanges(path, false)? {
        let is_page =
            exchange.status == 200 && exchange.content_type.as_deref() == Some("text/html");
        if let (true, Some(body)) = (is_page, &exchange.body) {
            let url = normalized(&exchange.url);
            documents.push(document(url, body, site, |u| sizes.get(u).copied()));
        }
    }
    Ok(())
}

/// The trace's responses; records it cannot read are reported (once: `warn`) and skipped.
fn exchanges(path: &Path, warn: bool) -> Result<impl Iterator<Item = Exchange>, LabError> {
    Ok(trace::open(path, TRACE_LIMITS)?.filter_map(move |item| {
        item.map_err(|skipped| {
            if warn {
                eprintln!("warning: skipped {skipped}");
            }
        })
        .ok()
    }))
}

/// A URL as the reference extractor writes it, so trace URLs and references match.
fn normalized(url: &str) -> String {
    Url::parse(url).map_or_else(|_| url.to_string(), String::from)
}

/// The URL of the page at `path` in the folder `root` served at `base`.
fn page_url(root: &Path, path: &Path, base: &Url) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    let relative = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    base.join(&relative).map_or(relative, String::from)
}

/// The page at `url` with its distinct inline resources, sized by `size_of` where it
/// knows them.
fn document(
    url: String,
    html: &[u8],
    site: &SiteArgs,
    size_of: impl Fn(&str) -> Option<u64>,
) -> Document {
    let mut seen = HashSet::new();
    let resources = wirefold_page::inline_references(html, &url)
        .into_iter()
        .filter(|r| seen.insert(r.url.clone()))
        .map(|r| {
            let size = size_of(&r.url);
            Resource {
                offset: r.offset as u64,
                tag_end: r.tag_end as u64,
                bytes: size.unwrap_or(site.default_resource_bytes),
                size_known: size.is_some(),
            }
        })
        .collect();
    Document {
        url,
        page_bytes: html.len() as u64,
        resources,
    }
}

/// The file under `root` that serves `url`, when `url` lies under `base` (query and
/// fragment ignored: the folder holds static files).
fn local_file(root: &Path, base: &Url, url: &str) -> Option<PathBuf> {
    let url = Url::parse(url).ok()?;
    let same_server = url.scheme() == base.scheme()
        && url.host_str() == base.host_str()
        && url.port_or_known_default() == base.port_or_known_default();
    let below = url.path().strip_prefix(base.path())?;
    if !same_server {
        return None;
    }
    let decoded = percent_encoding::percent_decode_str(below)
        .decode_utf8()
        .ok()?;
    let relative = Path::new(decoded.as_ref());
    // URL parsing already removed dot segments; a decoded `%2e%2e` must not climb out.
    let stays_inside = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    stays_inside.then(|| root.join(relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_files_lie_under_the_base_url() {
        let root = Path::new("/site");
        let base = Url::parse("https://example.com/docs/").unwrap();
        let file = |u: &str| local_file(root, &base, u);
        assert_eq!(
            file("https://example.com/docs/a/b.css?v=2"),
            Some(root.join("a/b.css"))
        );
        assert_eq!(
            file("https://example.com/docs/my%20file.js"),
            Some(root.join("my file.js"))
        );
        assert_eq!(file("https://example.com/other/b.css"), None);
        assert_eq!(file("https://cdn.example/docs/b.css"), None);
        assert_eq!(file("http://example.com/docs/b.css"), None);
        assert_eq!(file("https://example.com/docs/%2e%2e/secret"), None);
        let files = Url::parse("file:///").unwrap();
        assert_eq!(
            local_file(root, &files, "file:///assets/x.css"),
            Some(root.join("assets/x.css"))
        );
    }
}
