//! The origins of a server proxy: any `http://` or `https://` origin a link request
//! names, each reached through one shared connection pool.

use std::sync::Arc;

use http::Uri;

use crate::config::UpstreamConfig;
use crate::destinations::Destinations;
use crate::origin::{upstream_client, Origin, UpstreamClient};
use store::memo::Bounded;

/// Origins remembered at most (an `Origin` is a few fields over the shared pool, so
/// rebuilding an evicted one is cheap).
const MAX_ORIGINS: usize = 4096;

pub struct ForwardOrigins {
    client: UpstreamClient,
    config: UpstreamConfig,
    destinations: Destinations,
    origins: Bounded<String, Arc<Origin>>,
}

impl ForwardOrigins {
    pub fn new(
        config: &UpstreamConfig,
        destinations: Destinations,
    ) -> Result<ForwardOrigins, String> {
        Ok(ForwardOrigins {
            client: upstream_client(config, destinations)?,
            config: config.clone(),
            destinations,
            origins: Bounded::with_entries(MAX_ORIGINS),
        })
    }

    /// The site (cache and history namespace) of an absolute URI: its authority, with
    /// `https:` in front for TLS origins. `None` for anything but absolute http(s).
    pub fn site_of(uri: &Uri) -> Option<String> {
        let authority = uri.authority()?.as_str().to_ascii_lowercase();
        match uri.scheme_str()? {
            "http" => Some(authority),
            "https" => Some(format!("https:{authority}")),
            _ => None,
        }
    }

    /// Why `site` may not be fetched from, when it names an address literal the
    /// destinations policy forbids (names are checked as they resolve).
    pub fn refuse(&self, site: &str) -> Option<String> {
        let authority: http::uri::Authority = site.trim_start_matches("https:").parse().ok()?;
        self.destinations.refuse_literal(authority.host())
    }

    /// The origin serving `site` (as [`site_of`](Self::site_of) made it).
    pub fn origin(&self, site: &str) -> Result<Arc<Origin>, String> {
        if let Some(origin) = self.origins.get(site) {
            return Ok(origin);
        }
        let url = match site.strip_prefix("https:") {
            Some(authority) => format!("https://{authority}"),
            None => format!("http://{site}"),
        };
        let origin = Arc::new(Origin::with_client(
            &url,
            &self.config,
            self.client.clone(),
        )?);
        // Two first requests for a site may each build one; the last kept wins, and
        // both share the pool.
        self.origins.insert(site.to_string(), origin.clone());
        Ok(origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_keep_scheme_and_port_apart() {
        let site = |u: &str| ForwardOrigins::site_of(&u.parse().unwrap());
        assert_eq!(site("http://Example.com/a").as_deref(), Some("example.com"));
        assert_eq!(
            site("https://example.com:8443/").as_deref(),
            Some("https:example.com:8443")
        );
        assert_eq!(site("/relative"), None);
        assert_eq!(site("ftp://example.com/"), None);
    }

    #[tokio::test]
    async fn origins_are_built_once_per_site() {
        let forward =
            ForwardOrigins::new(&UpstreamConfig::default(), Destinations::Private).unwrap();
        let a = forward.origin("https:example.com").unwrap();
        let b = forward.origin("https:example.com").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let target = a.target(&"/x?y".parse().unwrap());
        assert_eq!(target.to_string(), "https://example.com/x?y");
    }
}
