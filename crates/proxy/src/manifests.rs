//! Page manifests as a service: built once per page content, kept in the store with
//! the instance (so they outlive restarts and, with a shared store, serve a fleet),
//! remembered in memory, and found by page URL before the origin answers (103 Early
//! Hints).
//!
//! Store records: `manifest/<content hash>/<page URL>` holds a page version's entries
//! (it references the page's body, so evicting the body removes it), and
//! `manifest-latest/<page URL>` names the latest version's hash. Only pages whose
//! content is the same for everyone get either: a manifest outlives the response and
//! reaches other clients (103), so a personalised page must not leave one.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use store::memo::Bounded;
use store::{Hash, Store};
use wirefold_page::manifest::{page_manifest, ManifestEntry, ManifestRules};

use crate::metrics::Metrics;

/// One page version's manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageManifest {
    /// The page content it was read from.
    #[serde(with = "hex_hash")]
    pub hash: Hash,
    /// Ranked, best first.
    pub entries: Vec<ManifestEntry>,
    /// Its stylesheets were read for their imports and fonts (`hints.stylesheet_depth`).
    #[serde(default)]
    pub stylesheets_read: bool,
}

/// Pages whose latest manifest is remembered in memory (a page not found is
/// remembered too, so asset requests do not read the store each time).
const PAGES_REMEMBERED: usize = 16_384;

/// The manifests of the pages served.
pub struct Manifests {
    store: Option<Store>,
    metrics: Arc<Metrics>,
    /// By page URL: the latest version's manifest, or `None` for no page known.
    latest: Bounded<String, Option<Arc<PageManifest>>>,
    /// By (page URL, content hash): every version served lately, personalised ones
    /// too (only someone served that very content gets its manifest), so a page is
    /// parsed once per content, not per request.
    versions: Bounded<(String, Hash), Arc<PageManifest>>,
    /// Page versions whose stylesheets are being read (or were): read once each.
    reading: Bounded<(String, Hash), ()>,
    /// Streamed pages scanned, by (page URL, SHA-256 of the response's `ETag`, so
    /// that an origin's long ETags take no more room than short ones): the hash the
    /// scan named, so that the same version is not scanned again on every request.
    streamed: Bounded<(String, Hash), Hash>,
}

impl Manifests {
    pub fn new(store: Option<Store>, metrics: Arc<Metrics>) -> Manifests {
        Manifests {
            store,
            metrics,
            latest: Bounded::with_entries(PAGES_REMEMBERED),
            versions: Bounded::with_entries(PAGES_REMEMBERED),
            reading: Bounded::with_entries(PAGES_REMEMBERED),
            streamed: Bounded::with_entries(PAGES_REMEMBERED),
        }
    }

    /// The manifest of the page content `html` (hashed `hash`) served at `page_url`:
    /// remembered, else read from the store, else parsed (on the blocking pool) and,
    /// when `shared` (the same for everyone), kept as the page's latest.
    pub async fn of_page(
        &self,
        page_url: &str,
        hash: Hash,
        html: &bytes::Bytes,
        rules: &ManifestRules,
        shared: bool,
    ) -> Arc<PageManifest> {
        if shared {
            if let Some(Some(known)) = self.latest.get(page_url) {
                if known.hash == hash {
                    return known;
                }
            }
        } else if let Some(known) = self.versions.get(&(page_url.to_string(), hash)) {
            return known;
        }
        let (store, url, html, rules) = (
            self.store.clone().filter(|_| shared),
            page_url.to_string(),
            html.clone(),
            rules.clone(),
        );
        let (manifest, built) = delta::blocking::run(move || {
            let key = version_key(&hash, &url);
            let stored = store
                .as_ref()
                .and_then(|s| s.get_record(&key).ok().flatten())
                .and_then(|bytes| serde_json::from_slice::<PageManifest>(&bytes).ok())
                .filter(|m| m.hash == hash);
            if let Some(stored) = stored {
                return (stored, false);
            }
            let references = wirefold_page::inline_references(&html, &url);
            let manifest = PageManifest {
                hash,
                entries: page_manifest(&references, &url, &rules),
                stylesheets_read: false,
            };
            if let Some(store) = &store {
                write(store, &url, &manifest);
            }
            (manifest, true)
        })
        .await;
        if built {
            self.metrics.manifest_built(manifest.entries.len());
        }
        let manifest = Arc::new(manifest);
        if shared {
            self.latest
                .insert(page_url.to_string(), Some(manifest.clone()));
        } else {
            self.versions
                .insert((page_url.to_string(), hash), manifest.clone());
        }
        manifest
    }

    /// Whether the streamed page at `page_url` whose response carries `etag` was
    /// scanned before and its manifest is still the page's latest (in memory): then
    /// this response need not be scanned again.
    pub fn streamed_is_known(&self, page_url: &str, etag: &str) -> bool {
        let Some(hash) = self
            .streamed
            .get(&(page_url.to_string(), Hash::of(etag.as_bytes())))
        else {
            return false;
        };
        self.latest
            .get(page_url)
            .flatten()
            .is_some_and(|latest| latest.hash == hash)
    }

    /// The manifest of a streamed page at `page_url` the same for everyone, read from
    /// `references` as it passed (`crate::page_stream`; `hash` names the bytes read),
    /// kept as the page's latest like a buffered page's; the one already kept when it
    /// is of the same bytes (its stylesheets may have been read since). The response's
    /// `etag`, if any, marks that version scanned (`streamed_is_known`).
    pub async fn keep_streamed(
        &self,
        page_url: &str,
        etag: Option<String>,
        hash: Hash,
        references: Vec<wirefold_page::InlineReference>,
        rules: &ManifestRules,
    ) -> Arc<PageManifest> {
        if let Some(etag) = etag {
            let key = (page_url.to_string(), Hash::of(etag.as_bytes()));
            self.streamed.insert(key, hash);
        }
        if let Some(known) = self.latest(page_url).await.filter(|m| m.hash == hash) {
            return known;
        }
        let (url, rules) = (page_url.to_string(), rules.clone());
        let entries = delta::blocking::run(move || page_manifest(&references, &url, &rules)).await;
        let manifest = Arc::new(PageManifest {
            hash,
            entries,
            stylesheets_read: false,
        });
        self.metrics.manifest_built(manifest.entries.len());
        self.latest
            .insert(page_url.to_string(), Some(manifest.clone()));
        if let Some(store) = self.store.clone() {
            let (url, kept) = (page_url.to_string(), manifest.clone());
            delta::blocking::run(move || write(&store, &url, &kept)).await;
        }
        manifest
    }

    /// Claims the reading of `manifest`'s stylesheets for the page at `page_url`:
    /// true for the first caller, false when read or being read.
    pub fn claim_stylesheets(&self, page_url: &str, manifest: &PageManifest) -> bool {
        if manifest.stylesheets_read {
            return false;
        }
        let key = (page_url.to_string(), manifest.hash);
        if self.reading.get(&key).is_some() {
            return false;
        }
        self.reading.insert(key, ());
        true
    }

    /// Puts `manifest` (a shared page's version, its stylesheets read) in place of
    /// the one kept for the page at `page_url`, in memory and in the store, while
    /// that version is still the page's latest in memory. Otherwise (the page changed
    /// meanwhile, or was forgotten) nothing is kept. Only the version's record is
    /// written: which version is the latest is the page's serving's to say (a newer
    /// one may be stored while this one is written).
    pub async fn replace(&self, page_url: &str, manifest: PageManifest, added_entries: usize) {
        let manifest = Arc::new(manifest);
        let still_latest = self
            .latest
            .get(page_url)
            .flatten()
            .is_some_and(|known| known.hash == manifest.hash);
        if !still_latest {
            return;
        }
        self.latest
            .insert(page_url.to_string(), Some(manifest.clone()));
        // Counted once the replacement is in force: a watcher of the count (a test)
        // finds it served from then on.
        self.metrics.manifest_entries.inc_by(added_entries as u64);
        if let Some(store) = self.store.clone() {
            let url = page_url.to_string();
            let written =
                delta::blocking::run(move || write_version(&store, &url, &manifest)).await;
            if let Err(e) = written {
                tracing::debug!(page_url, error = %e, "page manifest not stored");
            }
        }
    }

    /// The latest manifest for the page at `page_url` as remembered in memory now,
    /// without reading the store: `None` when nothing is remembered for it (never
    /// asked, or forgotten since), `Some(None)` for a URL known to have none.
    pub fn latest_remembered(&self, page_url: &str) -> Option<Option<Arc<PageManifest>>> {
        self.latest.get(page_url)
    }

    /// The latest manifest known for the page at `page_url`, for hints sent before
    /// the page itself is fetched; `None` for a URL never served as a shared page.
    pub async fn latest(&self, page_url: &str) -> Option<Arc<PageManifest>> {
        if let Some(known) = self.latest.get(page_url) {
            return known;
        }
        let store = self.store.clone()?;
        let url = page_url.to_string();
        let found = delta::blocking::run(move || read_latest(&store, &url))
            .await
            .map(Arc::new);
        self.latest.insert(page_url.to_string(), found.clone());
        found
    }
}

fn version_key(hash: &Hash, page_url: &str) -> String {
    format!("manifest/{}/{page_url}", hash.to_hex())
}

fn latest_key(page_url: &str) -> String {
    format!("manifest-latest/{page_url}")
}

/// Writes a version's manifest and points the page's latest at it. A failed write
/// only costs the next start a parse.
fn write(store: &Store, page_url: &str, manifest: &PageManifest) {
    let written = write_version(store, page_url, manifest).and_then(|anchor| {
        let pointer = manifest.hash.to_hex();
        store
            .put_record(&latest_key(page_url), pointer.as_bytes(), &[anchor])
            .map_err(|e| e.to_string())
    });
    if let Err(e) = written {
        tracing::debug!(page_url, error = %e, "page manifest not stored");
    }
}

/// Writes a version's manifest (not which version is the latest); returns the blob
/// its records reference.
///
/// The records reference the page's body, so evicting it removes them. A streamed
/// page's body is not in the store: its records reference the manifest itself, kept
/// as a blob, so they are evicted like anything else rather than kept for ever.
fn write_version(store: &Store, page_url: &str, manifest: &PageManifest) -> Result<Hash, String> {
    let value = serde_json::to_vec(manifest).map_err(|e| e.to_string())?;
    let anchor = if store.has_blob(&manifest.hash) {
        manifest.hash
    } else {
        store.put_blob(&value).map_err(|e| e.to_string())?
    };
    store
        .put_record(&version_key(&manifest.hash, page_url), &value, &[anchor])
        .map_err(|e| e.to_string())?;
    Ok(anchor)
}

fn read_latest(store: &Store, page_url: &str) -> Option<PageManifest> {
    let pointer = store.get_record(&latest_key(page_url)).ok()??;
    let hash = Hash::from_hex(std::str::from_utf8(&pointer).ok()?).ok()?;
    let bytes = store.get_record(&version_key(&hash, page_url)).ok()??;
    serde_json::from_slice::<PageManifest>(&bytes)
        .ok()
        .filter(|m| m.hash == hash)
}

/// A content hash as its hex form in a stored manifest.
mod hex_hash {
    use serde::{Deserialize, Deserializer, Serializer};
    use store::Hash;

    pub fn serialize<S: Serializer>(hash: &Hash, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&hash.to_hex())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Hash, D::Error> {
        let hex = String::deserialize(deserializer)?;
        Hash::from_hex(&hex).map_err(|_| serde::de::Error::custom("not a SHA-256 in hex"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: ManifestRules = ManifestRules {
        cross_site: false,
        max_entries: 16,
    };

    fn page(v: u32) -> bytes::Bytes {
        format!("<link rel=stylesheet href=/v{v}.css><img src=/i.png>").into()
    }

    #[tokio::test]
    async fn kept_in_the_store_across_restarts_for_shared_pages_only() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Store::open(dir.path(), store::StoreConfig::default()).unwrap();
        let url = "https://e.com/page";
        let html = page(1);
        let hash = {
            let store = open();
            let hash = store.put_blob(&html).unwrap();
            let metrics = Arc::new(Metrics::new());
            let manifests = Manifests::new(Some(store.clone()), metrics.clone());
            let built = manifests.of_page(url, hash, &html, &RULES, true).await;
            assert_eq!(built.entries.len(), 2);
            assert_eq!(built.entries[0].url, "https://e.com/v1.css");
            // A personalised page at another URL leaves nothing behind.
            let private = page(2);
            let private_hash = store.put_blob(&private).unwrap();
            let other = "https://e.com/mine";
            for _ in 0..3 {
                manifests
                    .of_page(other, private_hash, &private, &RULES, false)
                    .await;
            }
            assert!(manifests.latest(other).await.is_none());
            // Parsed once per content, personalised or not.
            assert_eq!(metrics.manifests_built.get(), 2);
            hash
        };
        let manifests = Manifests::new(Some(open()), Arc::new(Metrics::new()));
        let found = manifests
            .latest(url)
            .await
            .expect("read back after a restart");
        assert_eq!(found.hash, hash);
        assert_eq!(found.entries[1].url, "https://e.com/i.png");
        assert!(manifests.latest("https://e.com/mine").await.is_none());
        assert!(manifests.latest("https://e.com/never").await.is_none());
    }

    const URL: &str = "https://e.com/page";

    /// A store in `dir` and manifests over it that served versions 1 and 2 of the
    /// page at [`URL`], with their manifests.
    async fn two_versions_served(
        dir: &std::path::Path,
    ) -> (Store, Manifests, Vec<Arc<PageManifest>>) {
        let store = Store::open(dir, store::StoreConfig::default()).unwrap();
        let manifests = Manifests::new(Some(store.clone()), Arc::new(Metrics::new()));
        let mut built = Vec::new();
        for v in 1..=2 {
            let html = page(v);
            let hash = store.put_blob(&html).unwrap();
            built.push(manifests.of_page(URL, hash, &html, &RULES, true).await);
        }
        (store, manifests, built)
    }

    #[tokio::test]
    async fn a_new_version_replaces_the_latest() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, manifests, _) = two_versions_served(dir.path()).await;
        let url = URL;
        let latest = manifests.latest(url).await.unwrap();
        assert_eq!(latest.entries[0].url, "https://e.com/v2.css");
    }

    /// `manifest` as its stylesheets' reading leaves it.
    fn stylesheets_read(manifest: &PageManifest) -> PageManifest {
        PageManifest {
            stylesheets_read: true,
            ..manifest.clone()
        }
    }

    /// Stylesheets read for a version the page has moved on from (or one not
    /// remembered) replace nothing: the store's latest stays the newer version.
    #[tokio::test]
    async fn stylesheets_read_for_an_older_version_replace_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (store, manifests, built) = two_versions_served(dir.path()).await;
        let url = URL;
        let read_too_late = stylesheets_read(&built[0]);
        manifests.replace(url, read_too_late.clone(), 1).await;
        manifests
            .replace("https://e.com/other", read_too_late, 1)
            .await;
        let restarted = Manifests::new(Some(store.clone()), Arc::new(Metrics::new()));
        assert_eq!(restarted.latest(url).await.unwrap().hash, built[1].hash);
        assert!(restarted.latest("https://e.com/other").await.is_none());
        assert_eq!(manifests.latest(url).await.unwrap().hash, built[1].hash);

        let read_in_time = stylesheets_read(&built[1]);
        manifests.replace(url, read_in_time, 1).await;
        let restarted = Manifests::new(Some(store.clone()), Arc::new(Metrics::new()));
        assert!(restarted.latest(url).await.unwrap().stylesheets_read);

        // A newer version stored while the older one, still the latest in this
        // memory, has its stylesheets read: the store keeps naming the newer.
        let html = page(3);
        let hash = store.put_blob(&html).unwrap();
        let newer = restarted.of_page(url, hash, &html, &RULES, true).await;
        let read_meanwhile = stylesheets_read(&built[1]);
        manifests.replace(url, read_meanwhile, 1).await;
        let restarted = Manifests::new(Some(store), Arc::new(Metrics::new()));
        assert_eq!(restarted.latest(url).await.unwrap().hash, newer.hash);
    }
}
