//! The client proxy (`wirefold client`): near the users, it answers browsers from the
//! instances it holds when they are fresh and otherwise asks the server proxy over
//! the link, verifying every instance before a browser sees it.
//!
//! - [`config`]: every flag and key;
//! - `connection`: the one HTTP/2-over-TLS connection and its reconnection;
//! - `frames`: a link answer's body split into frames, each fed to
//!   [`link_protocol::reassemble`] (frames → the verified instance, pure);
//! - [`instances`]: what the client holds, per URL, per cluster and per origin;
//! - `push`: what the server proxy pushes with a page, and the requests waiting for it;
//! - `exchange`: one browser request, end to end;
//! - `listener`: the browsers' and the admin listeners, CONNECT tunnels.

pub mod config;
mod connection;
mod exchange;
mod frames;
pub mod instances;
mod listener;
pub mod metrics;
mod push;

use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderValue;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::ClientConfig;
pub use metrics::ClientMetrics;

use connection::Link;
use instances::Instances;

/// Why the client proxy could not start; each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Config(#[from] proxy::config::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("store at {location}: {source}")]
    Store {
        location: store::StoreLocation,
        source: store::StoreError,
    },
    #[error("upstream: {0}")]
    Upstream(String),
}

/// A started client proxy.
pub struct RunningClient {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub metrics: Arc<ClientMetrics>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningClient {
    /// Stops accepting and lets in-flight requests finish within the grace period.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// What every request shares.
struct Client {
    config: ClientConfig,
    /// Reverse mode: the site origin-form requests are for.
    site: Option<http::Uri>,
    /// The `wirefold-link` value: the token, or `1`.
    link_value: HeaderValue,
    link: Link,
    instances: Instances,
    /// Resources promised by pushes under way.
    pushes: Arc<push::Pushes>,
    metrics: Arc<ClientMetrics>,
}

/// Validates the configuration, opens the store, binds both listeners and starts
/// serving; the link is connected in the background (requests wait for it). Port 0
/// picks a free port; `RunningClient` tells which.
pub async fn start(config: ClientConfig) -> Result<RunningClient, ClientError> {
    config.check()?;
    let metrics = Arc::new(ClientMetrics::new());
    let link = Link::new(&config, metrics.clone()).map_err(ClientError::Upstream)?;
    let location = config
        .store_location()
        .map_err(|e| proxy::config::ConfigError::Invalid {
            key: "store",
            message: e.to_string(),
        })?;
    let store_config = store::StoreConfig {
        max_bytes: config.max_store_bytes,
        memory_bytes: (config.max_store_bytes / 8).min(128 << 20),
        max_object_bytes: config.max_body_bytes as u64,
    };
    let keep = config.keep_instances;
    let opened = proxy::blocking::run({
        let location = location.clone();
        move || Instances::open(&location, store_config, keep)
    })
    .await;
    let instances = opened.map_err(|source| ClientError::Store { location, source })?;

    let bind = |addr: SocketAddr| async move {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ClientError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| ClientError::Bind { addr, source })?;
        Ok::<_, ClientError>((listener, local))
    };
    let (listener, addr) = bind(config.listen).await?;
    let (admin_listener, admin_addr) = bind(config.admin).await?;

    let invalid =
        |key, message| ClientError::Config(proxy::config::ConfigError::Invalid { key, message });
    let site = config.site_uri().map_err(|m| invalid("site", m))?;
    let link_value = config.link_value().map_err(|m| invalid("link_token", m))?;
    let client = Arc::new(Client {
        config,
        site,
        link_value,
        link,
        instances,
        pushes: Arc::default(),
        metrics: metrics.clone(),
    });
    // Connect ahead of the first request; a failure is logged and retried on demand.
    tokio::spawn({
        let client = client.clone();
        async move {
            let _ = client.link.connection().await;
        }
    });
    let (stop, stopped) = watch::channel(false);
    let main = tokio::spawn(listener::accept_loop(listener, client, stopped.clone()));
    let admin_metrics = metrics.clone();
    let admin = tokio::spawn(proxy::server::admin_loop(
        admin_listener,
        listener::HEADER_TIMEOUT,
        stopped,
        move |req| std::future::ready(listener::admin(&admin_metrics, &req)),
    ));
    Ok(RunningClient {
        addr,
        admin_addr,
        metrics,
        stop,
        tasks: vec![main, admin],
    })
}
