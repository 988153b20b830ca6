//! The configuration in force, and its reload (`SIGHUP`, `POST /reload` on the admin
//! listener, `wirefold reload`). A reloaded configuration is validated whole before
//! anything changes; it then applies to what happens after it: new requests, new
//! connections, the next scan. What was built from the configuration at start (the
//! listeners, the store, the origin client, the TLS acceptor, the log format, the
//! access log) stays:
//! a changed key among those is named as needing a restart and keeps its running value.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::{Config, ConfigError};

/// Reads the configuration as at start (the file, then the command line's overrides).
pub type ConfigLoader = Arc<dyn Fn() -> Result<Config, Vec<ConfigError>> + Send + Sync>;

/// The configuration in force, swapped whole by a reload.
pub struct LiveConfig {
    current: ArcSwap<Config>,
    loader: Option<ConfigLoader>,
}

/// What a reload changed.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reloaded {
    /// Keys (dotted, as in the file) now in force with new values.
    pub applied: Vec<String>,
    /// Keys whose new value needs a restart; the running value stays.
    pub needs_restart: Vec<String>,
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("this server was started without a configuration source to reload from")]
    NoSource,
    #[error("the configuration was not reloaded:\n{}", list(.0))]
    Invalid(Vec<ConfigError>),
}

fn list(problems: &[ConfigError]) -> String {
    let lines: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
    lines.join("\n")
}

/// A configuration that cannot be reloaded (no loader): tests and embedders.
impl From<Config> for LiveConfig {
    fn from(config: Config) -> Self {
        LiveConfig::new(config, None)
    }
}

impl LiveConfig {
    pub fn new(config: Config, loader: Option<ConfigLoader>) -> Self {
        LiveConfig {
            current: ArcSwap::from_pointee(config),
            loader,
        }
    }

    /// The configuration in force now.
    pub fn current(&self) -> Arc<Config> {
        self.current.load_full()
    }

    /// Reads the configuration again and, when it is valid, puts it in force.
    pub fn reload(&self) -> Result<Reloaded, ReloadError> {
        let load = self.loader.as_ref().ok_or(ReloadError::NoSource)?;
        let config = load().map_err(ReloadError::Invalid)?;
        let problems = config.problems();
        if !problems.is_empty() {
            return Err(ReloadError::Invalid(problems));
        }
        Ok(self.replace(config))
    }

    /// Puts `config` in force, except what only a restart can change.
    pub fn replace(&self, mut config: Config) -> Reloaded {
        let running = self.current();
        let wanted = keys(&config);
        keep_what_needs_a_restart(&running, &mut config);
        let kept = keys(&config);
        let before = keys(&running);
        let reloaded = Reloaded {
            applied: changed(&before, &kept),
            needs_restart: changed(&wanted, &kept),
        };
        self.current.store(Arc::new(config));
        reloaded
    }
}

/// Copies into `new` the settings that were built into the running server at start.
fn keep_what_needs_a_restart(running: &Config, new: &mut Config) {
    new.listen = running.listen;
    new.admin = running.admin;
    new.data_dir = running.data_dir.clone();
    new.origin = running.origin.clone();
    new.root = running.root.clone();
    new.log_format = running.log_format;
    new.connection_threads = running.connection_threads;
    new.log = running.log.clone();
    new.tls = running.tls.clone();
    new.upstream = running.upstream.clone();
    new.cache.enabled = running.cache.enabled;
    new.cache.max_bytes = running.cache.max_bytes;
    new.cache.memory_bytes = running.cache.memory_bytes;
    new.cache.prepared_bytes = running.cache.prepared_bytes;
    new.limits.max_decoding_memory = running.limits.max_decoding_memory;
    new.limits.max_buffered_body = running.limits.max_buffered_body;
    new.limits.max_connections = running.limits.max_connections;
    new.files.serve_dotfiles = running.files.serve_dotfiles;
    new.link.enabled = running.link.enabled;
    new.link.destinations = running.link.destinations;
}

/// The configuration as dotted keys and their values (arrays compared whole).
fn keys(config: &Config) -> BTreeMap<String, toml::Value> {
    let mut flat = BTreeMap::new();
    if let Ok(toml::Value::Table(table)) = toml::Value::try_from(config) {
        flatten("", table, &mut flat);
    }
    flat
}

fn flatten(prefix: &str, table: toml::Table, flat: &mut BTreeMap<String, toml::Value>) {
    for (key, value) in table {
        let key = if prefix.is_empty() {
            key
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) => flatten(&key, inner, flat),
            value => {
                flat.insert(key, value);
            }
        }
    }
}

fn changed(a: &BTreeMap<String, toml::Value>, b: &BTreeMap<String, toml::Value>) -> Vec<String> {
    let mut keys: Vec<String> = a
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .chain(b.keys().filter(|k| !a.contains_key(*k)).cloned())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin_config() -> Config {
        Config {
            origin: Some("http://127.0.0.1:1".into()),
            ..Config::default()
        }
    }

    #[test]
    fn live_keys_apply_and_the_rest_is_named_and_kept() {
        let live = LiveConfig::new(origin_config(), None);
        let mut new = origin_config();
        new.limits.header_timeout_ms = 1234;
        new.compression.min_size = 7;
        new.admin_token = Some("t0ken".into());
        new.listen = "127.0.0.1:9999".parse().unwrap();
        new.origin = Some("http://127.0.0.1:2".into());
        new.tls.self_signed = true;
        let reloaded = live.replace(new);
        assert_eq!(
            reloaded.applied,
            [
                "admin_token",
                "compression.min_size",
                "limits.header_timeout_ms"
            ]
        );
        assert_eq!(
            reloaded.needs_restart,
            ["listen", "origin", "tls.self_signed"]
        );
        let now = live.current();
        assert_eq!(now.limits.header_timeout_ms, 1234);
        assert_eq!(now.listen.port(), 8080);
        assert_eq!(now.origin.as_deref(), Some("http://127.0.0.1:1"));
        assert!(!now.tls.self_signed);
    }

    #[test]
    fn every_setting_kept_for_a_restart_is_reported() {
        // Changing everything at once: whatever `keep_what_needs_a_restart` keeps must
        // show up as needing a restart, and nothing else.
        let live = LiveConfig::new(origin_config(), None);
        let mut new = origin_config();
        new.data_dir = "/elsewhere".into();
        new.cache.max_bytes += 1;
        new.limits.max_buffered_body += 1;
        new.limits.max_connections += 1;
        new.upstream.connect_timeout_ms += 1;
        new.link.destinations = crate::destinations::Destinations::Any;
        new.log.access_buffer += 1;
        new.connection_threads += 1;
        let reloaded = live.replace(new);
        assert!(reloaded.applied.is_empty(), "{reloaded:?}");
        assert_eq!(
            reloaded.needs_restart,
            [
                "cache.max_bytes",
                "connection_threads",
                "data_dir",
                "limits.max_buffered_body",
                "limits.max_connections",
                "link.destinations",
                "log.access_buffer",
                "upstream.connect_timeout_ms"
            ]
        );
    }

    #[test]
    fn an_invalid_configuration_changes_nothing() {
        let loader: ConfigLoader = Arc::new(|| {
            let mut bad = origin_config();
            bad.limits.header_timeout_ms = 0;
            bad.delta.history = 0;
            Ok(bad)
        });
        let live = LiveConfig::new(origin_config(), Some(loader));
        let before = live.current();
        let Err(ReloadError::Invalid(problems)) = live.reload() else {
            panic!("an invalid configuration was accepted");
        };
        let text = ReloadError::Invalid(problems).to_string();
        assert!(text.contains("limits.header_timeout_ms"), "{text}");
        assert!(text.contains("delta.history"), "{text}");
        assert!(Arc::ptr_eq(&before, &live.current()));
    }

    #[test]
    fn a_server_without_a_source_says_so() {
        let live = LiveConfig::new(origin_config(), None);
        assert!(matches!(live.reload(), Err(ReloadError::NoSource)));
    }
}
