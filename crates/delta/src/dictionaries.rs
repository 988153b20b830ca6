//! Which content may serve as a dictionary for whom, the `match` pattern announced
//! for a response, and derived dictionaries for pages and subresources a browser will
//! not keep.

use serde::{Deserialize, Serialize};
use store::{Hash, Store, StoreError};

use crate::config::DeltaConfig;

/// The path prefix under which wirefold serves derived dictionaries itself.
pub const DERIVED_PREFIX: &str = "/.wirefold/dict/";

/// What a browser fetches a resource as, RFC 9842's `match-dest`: a derived
/// dictionary is used only for requests of its destination.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Destination {
    /// A navigation: pages, and the trained dictionaries that serve them.
    #[default]
    Document,
    /// `<script src>`, `<link rel=modulepreload>`, `<link rel=preload as=script>`.
    Script,
    /// `<link rel=stylesheet>`, `<link rel=preload as=style>`.
    Style,
}

impl Destination {
    /// The `match-dest` token (and `Sec-Fetch-Dest` value).
    pub fn token(self) -> &'static str {
        match self {
            Destination::Document => "document",
            Destination::Script => "script",
            Destination::Style => "style",
        }
    }

    /// The destination a response of this media type is fetched as when a page
    /// references it: scripts and stylesheets; `None` for other types.
    pub fn of_subresource_type(content_type: &str) -> Option<Destination> {
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "text/css" => Some(Destination::Style),
            "application/javascript"
            | "text/javascript"
            | "application/x-javascript"
            | "application/ecmascript"
            | "text/ecmascript" => Some(Destination::Script),
            _ => None,
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
struct Registration {
    /// Sites (upstream hosts) whose content this is; a dictionary is only used for
    /// requests to the same site.
    sites: Vec<String>,
    /// For a derived dictionary: the `match` pattern it is announced with.
    derived_pattern: Option<String>,
    /// For a derived dictionary: its `match-dest` (registrations written before
    /// subresources had derived dictionaries were all pages').
    #[serde(default)]
    derived_destination: Destination,
}

fn record_key(hash: &Hash) -> String {
    format!("dict:{}", hash.to_hex())
}

fn load(store: &Store, hash: &Hash) -> Result<Registration, StoreError> {
    Ok(store
        .get_record(&record_key(hash))?
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default())
}

/// Changes the registration of `hash` as one atomic step against concurrent writers;
/// `change` says whether it changed anything (nothing is written otherwise).
fn update(
    store: &Store,
    hash: &Hash,
    mut change: impl FnMut(&mut Registration) -> bool,
) -> Result<(), StoreError> {
    store.update_record(&record_key(hash), |stored| {
        let mut registration: Registration = stored
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_default();
        if !change(&mut registration) {
            return None;
        }
        #[allow(
            clippy::expect_used,
            reason = "a struct of strings serializes: serde_json fails only on maps with \
                      non-string keys and on failing `Serialize` impls"
        )]
        let value = serde_json::to_vec(&registration).expect("registrations serialize");
        Some((value, vec![*hash]))
    })
}

/// Marks stored content of `site` as usable as a dictionary for that site.
pub fn register(store: &Store, hash: &Hash, site: &str) -> Result<(), StoreError> {
    update(store, hash, |registration| {
        if registration.sites.iter().any(|s| s == site) {
            return false;
        }
        registration.sites.push(site.to_string());
        true
    })
}

/// The dictionary's bytes, if `hash` is content of `site` still in the store.
pub fn dictionary_for(
    store: &Store,
    hash: &Hash,
    site: &str,
) -> Result<Option<bytes::Bytes>, StoreError> {
    if !load(store, hash)?.sites.iter().any(|s| s == site) {
        return Ok(None);
    }
    store.get_blob(hash)
}

/// The `match` pattern announced for a resource: a configured rule, else one
/// inferred from versioned names; `?*` covers every query of a clustered path.
pub fn pattern_for(config: &DeltaConfig, path: &str, query: Option<&str>) -> String {
    if let Some(rule) = config.pattern.iter().find(|r| path.starts_with(&r.prefix)) {
        return rule.pattern.clone();
    }
    let pattern = wirefold_http::url_pattern::infer(path);
    let Some(query) = query else { return pattern };
    // Path only: every query of the path is one cluster. Path plus named parameters:
    // the members must also carry those parameters with these values. URL patterns
    // cannot say "in any order", so the parameters are required in the order this
    // URL has them — the order a site's own links use.
    let mut out = format!("{pattern}?*");
    for pair in query.split('&').filter(|pair| {
        let name = pair.split('=').next().unwrap_or("");
        config.cluster_params.iter().any(|p| p == name)
    }) {
        out.push_str(&wirefold_http::url_pattern::escape(pair));
        out.push('*');
    }
    out
}

/// Publishes `hash` (content of `site`) as a derived dictionary announced with
/// `pattern` for requests of `destination`; returns the URL path it is served at.
pub fn publish_derived(
    store: &Store,
    hash: &Hash,
    site: &str,
    pattern: &str,
    destination: Destination,
) -> Result<String, StoreError> {
    update(store, hash, |registration| {
        let changed = !registration.sites.iter().any(|s| s == site)
            || registration.derived_pattern.as_deref() != Some(pattern)
            || registration.derived_destination != destination;
        if changed {
            if !registration.sites.iter().any(|s| s == site) {
                registration.sites.push(site.to_string());
            }
            registration.derived_pattern = Some(pattern.to_string());
            registration.derived_destination = destination;
        }
        changed
    })?;
    Ok(derived_url(hash))
}

fn derived_url(hash: &Hash) -> String {
    format!("{DERIVED_PREFIX}{}", hash.to_hex())
}

/// The record naming the derived dictionary published for (`site`, `pattern`,
/// `destination`). Pages keep the key they had before subresources were derived.
fn published_key(site: &str, pattern: &str, destination: Destination) -> String {
    match destination {
        Destination::Document => format!("derived:{site}|{pattern}"),
        other => format!("derived:{site}|{}|{pattern}", other.token()),
    }
}

/// The URL path of the derived dictionary published for resources matching
/// `pattern` on `site` fetched as `destination`, while its content is still stored.
pub fn published_derived(
    store: &Store,
    site: &str,
    pattern: &str,
    destination: Destination,
) -> Result<Option<String>, StoreError> {
    let published = store
        .get_record(&published_key(site, pattern, destination))?
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|hex| hex.parse::<Hash>().ok());
    Ok(published
        .filter(|h| store.has_blob(h))
        .map(|h| derived_url(&h)))
}

/// A derived dictionary's URL path, and whether this call published it.
#[derive(Debug, PartialEq, Eq)]
pub struct DerivedLink {
    pub url: String,
    pub newly_published: bool,
}

/// The derived dictionary for resources matching `pattern` on `site` fetched as
/// `destination`: the one published before while its content is still stored (a
/// stable dictionary is fetched once, not after every change), else `current`,
/// published now if it is registered as this site's content, which only content
/// for everyone ever is (`remember`). A response served from a cache entry that is
/// not for everyone is never published.
pub fn current_derived(
    store: &Store,
    site: &str,
    pattern: &str,
    destination: Destination,
    current: &Hash,
) -> Result<Option<DerivedLink>, StoreError> {
    if let Some(url) = published_derived(store, site, pattern, destination)? {
        return Ok(Some(DerivedLink {
            url,
            newly_published: false,
        }));
    }
    if !load(store, current)?.sites.iter().any(|s| s == site) {
        return Ok(None);
    }
    let url = publish_derived(store, current, site, pattern, destination)?;
    store.put_record(
        &published_key(site, pattern, destination),
        current.to_hex().as_bytes(),
        &[*current],
    )?;
    Ok(Some(DerivedLink {
        url,
        newly_published: true,
    }))
}

/// A derived dictionary as served: its content and what it is announced for.
pub struct DerivedDictionary {
    pub bytes: bytes::Bytes,
    /// The `match` pattern.
    pub pattern: String,
    /// The `match-dest`.
    pub destination: Destination,
}

/// The derived dictionary `hash` of `site`, if it was published and is still stored.
pub fn derived(
    store: &Store,
    hash: &Hash,
    site: &str,
) -> Result<Option<DerivedDictionary>, StoreError> {
    let registration = load(store, hash)?;
    let Some(pattern) = registration
        .derived_pattern
        .filter(|_| registration.sites.iter().any(|s| s == site))
    else {
        return Ok(None);
    };
    Ok(store.get_blob(hash)?.map(|bytes| DerivedDictionary {
        bytes,
        pattern,
        destination: registration.derived_destination,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionaries_are_per_site() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), store::StoreConfig::default()).unwrap();
        let hash = store.put_blob(b"shared words").unwrap();
        register(&store, &hash, "a.example").unwrap();
        assert!(dictionary_for(&store, &hash, "a.example")
            .unwrap()
            .is_some());
        assert!(dictionary_for(&store, &hash, "b.example")
            .unwrap()
            .is_none());
        assert!(derived(&store, &hash, "a.example").unwrap().is_none());
        let unregistered = store.put_blob(b"one user's page").unwrap();
        let link = current_derived(
            &store,
            "a.example",
            "/p",
            Destination::Document,
            &unregistered,
        )
        .unwrap();
        assert_eq!(link, None, "only registered content is derived from");
        let url =
            publish_derived(&store, &hash, "a.example", "/page", Destination::Document).unwrap();
        assert_eq!(url, format!("{DERIVED_PREFIX}{}", hash.to_hex()));
        let served = derived(&store, &hash, "a.example").unwrap().unwrap();
        assert_eq!(served.pattern, "/page");
        assert_eq!(served.destination, Destination::Document);
    }

    #[test]
    fn subresources_are_published_per_destination_and_stay_stable() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), store::StoreConfig::default()).unwrap();
        let v1 = store.put_blob(b"console.log(1)").unwrap();
        let v2 = store.put_blob(b"console.log(2)").unwrap();
        for hash in [&v1, &v2] {
            register(&store, hash, "a.example").unwrap();
        }
        let first = current_derived(&store, "a.example", "/app.js", Destination::Script, &v1)
            .unwrap()
            .unwrap();
        assert!(first.newly_published);
        assert_eq!(first.url, derived_url(&v1));
        // The script changes in place: the dictionary stays v1 (fetched once).
        let again = current_derived(&store, "a.example", "/app.js", Destination::Script, &v2)
            .unwrap()
            .unwrap();
        assert_eq!(again.url, first.url);
        assert!(!again.newly_published);
        assert_eq!(
            published_derived(&store, "a.example", "/app.js", Destination::Script).unwrap(),
            Some(first.url)
        );
        // Another destination of the same path is another publication.
        assert_eq!(
            published_derived(&store, "a.example", "/app.js", Destination::Style).unwrap(),
            None
        );
        let served = derived(&store, &v1, "a.example").unwrap().unwrap();
        assert_eq!(
            (served.pattern.as_str(), served.destination),
            ("/app.js", Destination::Script)
        );
        assert!(derived(&store, &v1, "b.example").unwrap().is_none());
    }

    #[test]
    fn registrations_written_before_destinations_are_pages() {
        let old: Registration =
            serde_json::from_slice(br#"{"sites":["a"],"derived_pattern":"/p"}"#).unwrap();
        assert_eq!(old.derived_destination, Destination::Document);
        assert_eq!(
            Destination::of_subresource_type("text/javascript; charset=utf-8"),
            Some(Destination::Script)
        );
        assert_eq!(
            Destination::of_subresource_type("text/css"),
            Some(Destination::Style)
        );
        assert_eq!(Destination::of_subresource_type("text/html"), None);
    }

    #[test]
    fn patterns_prefer_configuration() {
        let mut config = DeltaConfig::default();
        assert_eq!(
            pattern_for(&config, "/js/app.1a2b3c4d.js", None),
            "/js/app.*.js"
        );
        assert_eq!(pattern_for(&config, "/search", Some("q=a")), "/search?*");
        config.cluster_params = vec!["lang".into()];
        assert_eq!(
            pattern_for(&config, "/search", Some("q=a&lang=en")),
            "/search?*lang=en*"
        );
        assert!(wirefold_http::url_pattern::matches(
            "/search?*lang=en*",
            "/search?q=b&lang=en"
        ));
        assert!(!wirefold_http::url_pattern::matches(
            "/search?*lang=en*",
            "/search?q=b&lang=fr"
        ));
        config.cluster_params.clear();
        config.pattern.push(crate::config::PatternRule {
            prefix: "/js/".into(),
            pattern: "/js/*".into(),
        });
        assert_eq!(pattern_for(&config, "/js/app.1a2b3c4d.js", None), "/js/*");
    }
}
