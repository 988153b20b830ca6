//! Which content may serve as a dictionary for whom, the `match` pattern announced
//! for a response, and derived dictionaries for pages a browser will not keep.

use serde::{Deserialize, Serialize};
use store::{Hash, Store, StoreError};

use crate::config::DeltaConfig;

/// The path prefix under which wirefold serves derived dictionaries itself.
pub const DERIVED_PREFIX: &str = "/.wirefold/dict/";

#[derive(Serialize, Deserialize, Default)]
struct Registration {
    /// Sites (upstream hosts) whose content this is; a dictionary is only used for
    /// requests to the same site.
    sites: Vec<String>,
    /// For a derived dictionary: the `match` pattern it is announced with.
    derived_pattern: Option<String>,
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

#[allow(
    clippy::expect_used,
    reason = "a struct of strings serializes: serde_json fails only on maps with \
              non-string keys and on failing `Serialize` impls"
)]
fn save(store: &Store, hash: &Hash, registration: &Registration) -> Result<(), StoreError> {
    let value = serde_json::to_vec(registration).expect("registrations serialize");
    store.put_record(&record_key(hash), &value, &[*hash])
}

/// Marks stored content of `site` as usable as a dictionary for that site.
pub fn register(store: &Store, hash: &Hash, site: &str) -> Result<(), StoreError> {
    let mut registration = load(store, hash)?;
    if registration.sites.iter().any(|s| s == site) {
        return Ok(());
    }
    registration.sites.push(site.to_string());
    save(store, hash, &registration)
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
/// `pattern`; returns the URL path it is served at.
pub fn publish_derived(
    store: &Store,
    hash: &Hash,
    site: &str,
    pattern: &str,
) -> Result<String, StoreError> {
    let mut registration = load(store, hash)?;
    let changed = !registration.sites.iter().any(|s| s == site)
        || registration.derived_pattern.as_deref() != Some(pattern);
    if changed {
        if !registration.sites.iter().any(|s| s == site) {
            registration.sites.push(site.to_string());
        }
        registration.derived_pattern = Some(pattern.to_string());
        save(store, hash, &registration)?;
    }
    Ok(format!("{DERIVED_PREFIX}{}", hash.to_hex()))
}

/// The derived dictionary for pages matching `pattern` on `site`: the one published
/// before while its content is still stored (a stable dictionary is fetched once,
/// not after every change), else `current`, published now if it is registered as
/// this site's content, which only content for everyone ever is (`remember`). A page
/// served from a cache entry that is not for everyone is never published. Returns
/// its URL path.
pub fn current_derived(
    store: &Store,
    site: &str,
    pattern: &str,
    current: &Hash,
) -> Result<Option<String>, StoreError> {
    let key = format!("derived:{site}|{pattern}");
    let published = store
        .get_record(&key)?
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|hex| hex.parse::<Hash>().ok());
    if let Some(hash) = published.filter(|h| store.has_blob(h)) {
        return Ok(Some(format!("{DERIVED_PREFIX}{}", hash.to_hex())));
    }
    if !load(store, current)?.sites.iter().any(|s| s == site) {
        return Ok(None);
    }
    let url = publish_derived(store, current, site, pattern)?;
    store.put_record(&key, current.to_hex().as_bytes(), &[*current])?;
    Ok(Some(url))
}

/// A derived dictionary to serve: its bytes and `match` pattern.
pub fn derived(
    store: &Store,
    hash: &Hash,
    site: &str,
) -> Result<Option<(bytes::Bytes, String)>, StoreError> {
    let registration = load(store, hash)?;
    let Some(pattern) = registration
        .derived_pattern
        .filter(|_| registration.sites.iter().any(|s| s == site))
    else {
        return Ok(None);
    };
    Ok(store.get_blob(hash)?.map(|bytes| (bytes, pattern)))
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
        let derived_url = current_derived(&store, "a.example", "/p", &unregistered).unwrap();
        assert_eq!(derived_url, None, "only registered content is derived from");
        let url = publish_derived(&store, &hash, "a.example", "/page").unwrap();
        assert_eq!(url, format!("{DERIVED_PREFIX}{}", hash.to_hex()));
        assert_eq!(
            derived(&store, &hash, "a.example").unwrap().unwrap().1,
            "/page"
        );
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
