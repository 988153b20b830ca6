//! The text subresources a page makes the browser fetch — same-site scripts and
//! stylesheets — so the page can link their derived dictionaries.
//!
//! A page's list is read once per page content (memoized by its hash) and bounded.
//! It is the seed of the page manifest issue 13 will keep in the store: everything a
//! page says about its subresources is in [`PageSubresources`] and [`Subresource`],
//! so they can move into that manifest whole.

use std::sync::Arc;

use store::memo::Bounded;
use store::Hash;
use url::Url;
use wirefold_page::{inline_references, ReferenceKind};

use crate::dictionaries::Destination;

/// One script or stylesheet of a page, on the page's own host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subresource {
    pub path: String,
    pub query: Option<String>,
    pub destination: Destination,
}

/// Subresources kept per page, at most: a page naming 10,000 scripts costs one parse
/// and this many entries. `delta.subresource_dictionaries` (links per page) is
/// bounded by it.
pub const MAX_PER_PAGE: usize = 64;

/// Pages whose subresources are remembered.
const PAGES_REMEMBERED: usize = 4096;

/// The same-site scripts and stylesheets of `html`, served at `page_url` (absolute),
/// in document order, each once, at most [`MAX_PER_PAGE`]. Cross-site references are
/// left out: a dictionary is only ever linked for the site's own content.
pub fn text_subresources(html: &[u8], page_url: &str) -> Vec<Subresource> {
    let Ok(page) = Url::parse(page_url) else {
        return Vec::new();
    };
    let mut found: Vec<Subresource> = Vec::new();
    for reference in inline_references(html, page_url) {
        let Some(destination) = destination_of(&reference.kind) else {
            continue;
        };
        let Ok(url) = Url::parse(&reference.url) else {
            continue;
        };
        if url.origin() != page.origin() {
            continue;
        }
        let subresource = Subresource {
            path: url.path().to_string(),
            query: url.query().map(str::to_string),
            destination,
        };
        if !found.contains(&subresource) {
            found.push(subresource);
            if found.len() == MAX_PER_PAGE {
                break;
            }
        }
    }
    found
}

/// What a browser fetches a reference as, for the kinds that are text it may get as
/// a delta: scripts and stylesheets.
fn destination_of(kind: &ReferenceKind) -> Option<Destination> {
    match kind {
        ReferenceKind::Script => Some(Destination::Script),
        ReferenceKind::Link { rel, destination } => {
            let has = |token: &str| rel.split_ascii_whitespace().any(|t| t == token);
            if has("stylesheet") {
                Some(Destination::Style)
            } else if has("modulepreload") {
                Some(Destination::Script)
            } else if has("preload") {
                match destination.as_deref() {
                    Some("script") => Some(Destination::Script),
                    Some("style") => Some(Destination::Style),
                    _ => None,
                }
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The subresources of recently served pages, by (content hash, page origin): the
/// HTML is parsed once per page version, not per request.
pub struct PageSubresources {
    pages: Bounded<(Hash, String), Arc<Vec<Subresource>>>,
}

impl Default for PageSubresources {
    fn default() -> Self {
        PageSubresources {
            pages: Bounded::with_entries(PAGES_REMEMBERED),
        }
    }
}

impl PageSubresources {
    /// The subresources of the page `hash` served at `page_url`, parsed from `html`
    /// on the blocking pool the first time.
    pub async fn of(
        &self,
        hash: Hash,
        page_url: &str,
        html: &bytes::Bytes,
    ) -> Arc<Vec<Subresource>> {
        let key = (hash, origin_of(page_url));
        if let Some(found) = self.pages.get(&key) {
            return found;
        }
        let (html, url) = (html.clone(), page_url.to_string());
        let found = Arc::new(crate::blocking::run(move || text_subresources(&html, &url)).await);
        self.pages.insert(key, found.clone());
        found
    }
}

/// `scheme://host:port` of an absolute URL: the part same-site filtering depends on.
fn origin_of(url: &str) -> String {
    Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(found: &[Subresource]) -> Vec<(&str, Destination)> {
        found
            .iter()
            .map(|s| (s.path.as_str(), s.destination))
            .collect()
    }

    #[test]
    fn scripts_and_stylesheets_of_the_same_site_only() {
        let html = br#"<html><head>
            <link rel="stylesheet" href="/site.css">
            <link rel="preload" as="script" href="lib.js">
            <link rel="preload" as="image" href="/hero.png">
            <link rel="icon" href="/favicon.ico">
            <script src="https://cdn.example/jquery.js"></script>
            <script src="//other.example/x.js"></script>
            </head><body>
            <script src="/app.js"></script><script src="/app.js"></script>
            <script src="/page"></script>
            <img src="/a.png"><script>inline()</script>
            <script type=module src="/m.js?v=2"></script>
            </body></html>"#;
        let found = text_subresources(html, "http://127.0.0.1:8080/dir/page");
        assert_eq!(
            paths(&found),
            vec![
                ("/site.css", Destination::Style),
                ("/dir/lib.js", Destination::Script),
                ("/app.js", Destination::Script),
                ("/page", Destination::Script),
                ("/m.js", Destination::Script),
            ]
        );
        assert_eq!(found[4].query.as_deref(), Some("v=2"));
    }

    #[test]
    fn a_page_naming_ten_thousand_scripts_keeps_a_bounded_list() {
        let mut html = String::from("<html><body>");
        for i in 0..10_000 {
            html.push_str(&format!("<script src=\"/s{i}.js\"></script>"));
        }
        let found = text_subresources(html.as_bytes(), "http://a.example/");
        assert_eq!(found.len(), MAX_PER_PAGE);
        assert_eq!(found[0].path, "/s0.js");
    }

    #[test]
    fn hostile_bases_yield_nothing() {
        assert!(text_subresources(b"<script src=/a.js></script>", "not a url").is_empty());
        assert!(text_subresources(b"\xff\xfe<script src=", "http://a.example/").is_empty());
    }
}
