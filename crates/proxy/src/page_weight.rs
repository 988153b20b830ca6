//! What the rest of a page weighs, for adaptive fidelity's estimate of a page with
//! its subresources (Seshan, Stemm & Katz): the sizes of responses served lately, by
//! URL, added up over the subresources the page's manifest names.
//!
//! The page is the one the request's `Referer` names, the client's word; but a
//! subresource counts with a page only when that page's manifest (read by the server
//! from the page itself) names it, and only sizes of responses the server itself
//! served as reusable are counted, so a client can pick among pages the server knows,
//! never add to one.

use fidelity::choice::PageWeight;
use http::header::{HeaderMap, REFERER};
use store::memo::Bounded;

use crate::manifests::PageManifest;

/// Responses whose size is remembered (the most recently served).
const SIZES_REMEMBERED: usize = 65_536;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Size {
    bytes: u64,
    /// Of a type that may have variants (an image, or text with the minifiers).
    negotiable: bool,
}

/// Sizes of the responses served lately, by absolute URL as the client named it.
pub struct PageWeights {
    sizes: Bounded<String, Size>,
}

impl Default for PageWeights {
    fn default() -> PageWeights {
        PageWeights {
            sizes: Bounded::with_entries(SIZES_REMEMBERED),
        }
    }
}

impl PageWeights {
    /// Remembers that `url` answered `bytes` long (a copy of `url` only when new).
    pub fn record(&self, url: &str, bytes: u64, negotiable: bool) {
        let size = Size { bytes, negotiable };
        if self.sizes.get(url) != Some(size) {
            self.sizes.insert(url.to_owned(), size);
        }
    }

    /// The rest of the page served at `page_url`, whose manifest is `manifest`,
    /// around its subresource `url`: the page's own bytes and its other
    /// subresources' (those of known size), apart by whether they may have variants.
    /// `None` when the manifest does not name `url`.
    pub fn around(&self, page_url: &str, manifest: &PageManifest, url: &str) -> Option<PageWeight> {
        if !manifest.entries.iter().any(|entry| entry.url == url) {
            return None;
        }
        let mut weight = PageWeight {
            fixed_bytes: self.sizes.get(page_url).map_or(0, |size| size.bytes),
            negotiable_bytes: 0,
        };
        for entry in manifest.entries.iter().filter(|entry| entry.url != url) {
            match self.sizes.get(entry.url.as_str()) {
                Some(Size {
                    bytes,
                    negotiable: true,
                }) => weight.negotiable_bytes += bytes,
                Some(Size { bytes, .. }) => weight.fixed_bytes += bytes,
                None => {}
            }
        }
        Some(weight)
    }
}

/// The page a subresource request comes from, as its `Referer` names it.
pub fn referring_page(request: &HeaderMap) -> Option<&str> {
    request.get(REFERER)?.to_str().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::Hash;
    use wirefold_page::manifest::{Destination, ManifestEntry, Priority};

    fn entry(url: &str) -> ManifestEntry {
        ManifestEntry::new(url, Destination::Image, Priority::EagerImage)
    }

    #[test]
    fn a_page_weighs_itself_and_the_subresources_its_manifest_names() {
        let weights = PageWeights::default();
        let page = "http://site.test/p.html";
        let manifest = PageManifest {
            hash: Hash::of(b"page"),
            entries: vec![
                entry("http://site.test/a.jpg"),
                entry("http://site.test/b.jpg"),
                entry("http://site.test/font.woff2"),
                entry("http://site.test/never-served.jpg"),
            ],
            stylesheets_read: false,
        };
        weights.record(page, 20_000, false);
        weights.record("http://site.test/a.jpg", 300_000, true);
        weights.record("http://site.test/b.jpg", 100_000, true);
        weights.record("http://site.test/font.woff2", 40_000, false);
        // Served, but not part of the page: a Referer cannot add it.
        weights.record("http://site.test/huge.jpg", 9_000_000, true);
        assert_eq!(
            weights.around(page, &manifest, "http://site.test/a.jpg"),
            Some(PageWeight {
                fixed_bytes: 60_000,
                negotiable_bytes: 100_000,
            })
        );
        assert_eq!(
            weights.around(page, &manifest, "http://site.test/huge.jpg"),
            None
        );
    }
}
