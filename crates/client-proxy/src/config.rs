//! The client proxy's configuration: one TOML document mirroring every flag of
//! `wirefold client`. Every key has a default except `upstream`.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use proxy::config::ConfigError;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientConfig {
    /// The server proxy: `https://HOST:PORT`.
    pub upstream: String,
    /// Connect here instead of resolving the upstream's host, still verifying the
    /// certificate for that host (like curl's `--connect-to`).
    pub upstream_connect: Option<SocketAddr>,
    /// Extra PEM certificates trusted for the upstream, besides the public roots.
    pub upstream_ca: Option<PathBuf>,
    /// The link token the server proxy requires; `None` sends `1` (no token).
    pub link_token: Option<String>,
    /// The browsers' listener (forward proxy, and reverse proxy with `site`).
    pub listen: SocketAddr,
    /// The admin listener (`/metrics`, `/healthz`).
    pub admin: SocketAddr,
    /// Where held instances live (the embedded store, unless `store` names Redis).
    pub data_dir: PathBuf,
    /// Held instances on Redis, shared by several client proxies: the forms of the
    /// server's `store` (`redis://HOST:PORT[/DB]`, `redis+cluster://…`, seed list).
    /// Unset, the embedded store in `data_dir`.
    pub store: Option<String>,
    /// The time budget of one call to that Redis, in milliseconds; as the server's.
    pub store_budget_ms: u64,
    /// Reverse mode: origin-form requests go to this site (`http://` or `https://` URL).
    pub site: Option<String>,
    /// Instances kept per URL, newest first; 0 keeps none (and so names none).
    pub keep_instances: usize,
    /// Bodies held in memory (stale instances, deltas and their results, buffered full
    /// bodies, request bodies) are at most this long; a longer full body streams
    /// through and is verified at its end.
    pub max_body_bytes: usize,
    /// Bytes of held instances on disk; least recently used go first beyond it.
    pub max_store_bytes: u64,
    /// HTTP/2 stream window on the link: the server paces stale data by what it lets
    /// through, so it must stay small.
    pub stream_window_bytes: u32,
    /// HTTP/2 connection window on the link.
    pub connection_window_bytes: u32,
    /// Time allowed to reach the upstream (TCP and TLS), and a CONNECT target.
    pub connect_timeout_ms: u64,
    /// Longest wait for a link response head, and longest pause inside its frames.
    pub response_idle_timeout_ms: u64,
    /// How long in-flight requests may run after SIGTERM/SIGINT.
    pub shutdown_grace_ms: u64,
    /// Accept the subresources the server proxy pushes with a page (`wirefold-push`
    /// on page requests): kept like any answer, so the browser's requests for them
    /// are answered here.
    pub accept_push: bool,
    /// With a page request, name the instances held for its origin
    /// (`wirefold-held`), so the server does not push them again. Off, the server
    /// cannot tell which of the page's resources this client proxy holds and pushes
    /// them whole every time.
    pub announce_held: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            upstream: String::new(),
            upstream_connect: None,
            upstream_ca: None,
            link_token: None,
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 3128)),
            admin: SocketAddr::from((Ipv4Addr::LOCALHOST, 9181)),
            data_dir: PathBuf::from("./wirefold-client-data"),
            store: None,
            store_budget_ms: proxy::config::DEFAULT_STORE_BUDGET_MS,
            site: None,
            keep_instances: 8,
            max_body_bytes: 64 << 20,
            max_store_bytes: 1 << 30,
            stream_window_bytes: 128 << 10,
            connection_window_bytes: 2 << 20,
            connect_timeout_ms: 5_000,
            response_idle_timeout_ms: 60_000,
            shutdown_grace_ms: 30_000,
            accept_push: true,
            announce_held: true,
        }
    }
}

impl ClientConfig {
    /// Reads and parses a TOML file; unknown keys are errors.
    pub fn from_file(path: &Path) -> Result<ClientConfig, ConfigError> {
        proxy::config::read_toml(path)
    }

    /// Where held instances live: Redis when `store` is set, else `data_dir/store`.
    pub fn store_location(&self) -> Result<store::StoreLocation, store::TargetError> {
        store::StoreLocation::from_setting(
            self.store.as_deref(),
            self.data_dir.join("store"),
            std::time::Duration::from_millis(self.store_budget_ms),
        )
    }

    /// Validates the whole document; the first problem found is reported with its key.
    pub fn check(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: String| Err(ConfigError::Invalid { key, message });
        if self.upstream.is_empty() {
            return invalid(
                "upstream",
                "set the server proxy's URL, e.g. https://proxy.example:8443".into(),
            );
        }
        if let Err(message) = self.upstream_uri() {
            return invalid("upstream", message);
        }
        if let Err(message) = self.site_uri() {
            return invalid("site", message);
        }
        if let Err(message) = self.link_value() {
            return invalid("link_token", message);
        }
        if let Some(ca) = &self.upstream_ca {
            if !ca.is_file() {
                return invalid("upstream_ca", format!("{} is not a file", ca.display()));
            }
        }
        if let Err(e) = self.store_location() {
            return invalid("store", e.to_string());
        }
        if !(1..=proxy::config::MAX_STORE_BUDGET_MS).contains(&self.store_budget_ms) {
            return invalid(
                "store_budget_ms",
                format!(
                    "must be 1 to {} (milliseconds)",
                    proxy::config::MAX_STORE_BUDGET_MS
                ),
            );
        }
        if self.max_body_bytes < 64 << 10 {
            return invalid("max_body_bytes", "must be at least 65536".into());
        }
        // RFC 9113 §6.9.2: windows are 31-bit; 65535 is the protocol's minimum useful one.
        for (key, value) in [
            ("stream_window_bytes", self.stream_window_bytes),
            ("connection_window_bytes", self.connection_window_bytes),
        ] {
            if !(65_535..=(1 << 31) - 1).contains(&value) {
                return invalid(key, format!("{value} is outside 65535..=2147483647"));
            }
        }
        for (key, value) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("response_idle_timeout_ms", self.response_idle_timeout_ms),
        ] {
            if value == 0 {
                return invalid(key, "must be greater than 0".into());
            }
        }
        Ok(())
    }

    /// The upstream URL, which must be `https://HOST[:PORT]` with nothing after it.
    /// Reverse mode's site, when set.
    pub fn site_uri(&self) -> Result<Option<http::Uri>, String> {
        self.site
            .as_deref()
            .map(|site| absolute_url(site, &["http", "https"]))
            .transpose()
    }

    /// The `wirefold-link` value: the token, or `1`.
    pub fn link_value(&self) -> Result<http::HeaderValue, String> {
        match self.link_token.as_deref() {
            None => Ok(http::HeaderValue::from_static("1")),
            Some(token) => http::HeaderValue::from_str(token)
                .ok()
                .filter(|_| !token.is_empty())
                .ok_or_else(|| "must be non-empty visible ASCII (a header value)".into()),
        }
    }

    pub fn upstream_uri(&self) -> Result<http::Uri, String> {
        let uri = absolute_url(&self.upstream, &["https"])?;
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(format!(
                "`{}` must be just https://HOST:PORT (no path)",
                self.upstream
            ));
        }
        Ok(uri)
    }
}

fn absolute_url(text: &str, schemes: &[&str]) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some(scheme), Some(_)) if schemes.contains(&scheme) => Ok(uri),
        _ => Err(format!(
            "`{text}` must be an absolute {} URL",
            schemes
                .iter()
                .map(|s| format!("{s}://"))
                .collect::<Vec<_>>()
                .join(" or ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_configuration_reads_back_the_same() {
        let client = ClientConfig::default();
        let written = toml::to_string(&client).unwrap();
        let read: ClientConfig = toml::from_str(&written).unwrap();
        assert_eq!(toml::to_string(&read).unwrap(), written);
    }

    #[test]
    fn defaults_need_an_upstream() {
        let c: ClientConfig = toml::from_str("").unwrap();
        assert_eq!(c.listen.port(), 3128);
        assert_eq!(c.keep_instances, 8);
        assert!(c.check().unwrap_err().to_string().contains("`upstream`"));
    }

    #[test]
    fn unknown_key_is_an_error_naming_it() {
        let err =
            toml::from_str::<ClientConfig>("upstream = \"https://a:1\"\nkeep = 3").unwrap_err();
        assert!(err.to_string().contains("keep"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut c = ClientConfig {
            upstream: "http://plain:80".into(),
            ..ClientConfig::default()
        };
        assert!(c.check().unwrap_err().to_string().contains("`upstream`"));
        c.upstream = "https://proxy:8443/path".into();
        assert!(c.check().unwrap_err().to_string().contains("no path"));
        c.upstream = "https://proxy:8443".into();
        c.check().unwrap();
        c.site = Some("ftp://x".into());
        assert!(c.check().unwrap_err().to_string().contains("`site`"));
        c.site = None;
        c.stream_window_bytes = 10;
        assert!(c
            .check()
            .unwrap_err()
            .to_string()
            .contains("stream_window_bytes"));
        c.stream_window_bytes = 1 << 20;
        c.link_token = Some("a\nb".into());
        assert!(c.check().unwrap_err().to_string().contains("link_token"));
    }
}
