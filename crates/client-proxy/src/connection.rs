//! The link: one HTTP/2 connection over TLS to the server proxy, shared by every
//! request, made again (after a capped backoff) when it fails.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::config::ClientConfig;
use crate::metrics::ClientMetrics;

/// Request bodies are buffered (bounded), so a failed request can be sent again.
pub type LinkSender = http2::SendRequest<Full<Bytes>>;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("cannot reach the server proxy at {target}: {detail}")]
    Unreachable { target: String, detail: String },
    #[error("the server proxy at {target} did not offer HTTP/2 (ALPN h2)")]
    NotHttp2 { target: String },
    #[error("no answer from the server proxy within {0:?}")]
    Timeout(Duration),
}

/// A sender on one connection; `generation` tells connections apart.
#[derive(Clone)]
pub struct Connection {
    pub generation: u64,
    pub sender: LinkSender,
}

pub struct Link {
    /// `host:port` of the upstream URL, for messages and resolution.
    target: String,
    server_name: ServerName<'static>,
    connect_to: Option<SocketAddr>,
    tls: TlsConnector,
    http2: http2::Builder<TokioExecutor>,
    connect_timeout: Duration,
    state: Mutex<LinkState>,
    metrics: Arc<ClientMetrics>,
}

#[derive(Default)]
struct LinkState {
    current: Option<Connection>,
    generations: u64,
    failures: u32,
    retry_at: Option<Instant>,
}

impl Link {
    pub fn new(config: &ClientConfig, metrics: Arc<ClientMetrics>) -> Result<Link, String> {
        let uri = config.upstream_uri()?;
        let host = uri.host().ok_or("the upstream URL needs a host")?;
        let port = uri.port_u16().unwrap_or(443);
        let server_name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
            .map_err(|e| format!("upstream host `{host}`: {e}"))?;
        let mut tls = connect::tls_client_config(config.upstream_ca.as_deref())
            .map_err(|e| format!("upstream_ca {e}"))?;
        tls.alpn_protocols = vec![b"h2".to_vec()];
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .initial_stream_window_size(config.stream_window_bytes)
            .initial_connection_window_size(config.connection_window_bytes);
        Ok(Link {
            target: format!("{host}:{port}"),
            server_name,
            connect_to: config.upstream_connect,
            tls: TlsConnector::from(Arc::new(tls)),
            http2,
            connect_timeout: Duration::from_millis(config.connect_timeout_ms),
            state: Mutex::new(LinkState::default()),
            metrics,
        })
    }

    /// The current connection, or a new one. After a failed attempt the next waits
    /// out a backoff (doubling, at most [`MAX_BACKOFF`]); requests queue meanwhile.
    pub async fn connection(&self) -> Result<Connection, LinkError> {
        let mut state = self.state.lock().await;
        if let Some(current) = &state.current {
            if !current.sender.is_closed() {
                return Ok(current.clone());
            }
        }
        state.current = None;
        if let Some(at) = state.retry_at {
            tokio::time::sleep_until(at).await;
        }
        match self.connect().await {
            Ok(sender) => {
                if state.generations > 0 {
                    self.metrics.reconnects.inc();
                }
                state.generations += 1;
                state.failures = 0;
                state.retry_at = None;
                let connection = Connection {
                    generation: state.generations,
                    sender,
                };
                state.current = Some(connection.clone());
                tracing::info!(upstream = %self.target, "link connected");
                Ok(connection)
            }
            Err(e) => {
                state.failures += 1;
                let backoff = FIRST_BACKOFF
                    .saturating_mul(1 << (state.failures - 1).min(16))
                    .min(MAX_BACKOFF);
                state.retry_at = Some(Instant::now() + backoff);
                tracing::warn!(error = %e, "link connection failed");
                Err(e)
            }
        }
    }

    /// Forgets connection `generation` after a request on it failed, so the next
    /// request connects anew (unless another already did).
    pub async fn discard(&self, generation: u64) {
        let mut state = self.state.lock().await;
        if state
            .current
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            state.current = None;
        }
    }

    async fn connect(&self) -> Result<LinkSender, LinkError> {
        tokio::time::timeout(self.connect_timeout, self.handshake())
            .await
            .unwrap_or_else(|_| {
                Err(self.unreachable(format!("no connection within {:?}", self.connect_timeout)))
            })
    }

    async fn handshake(&self) -> Result<LinkSender, LinkError> {
        let addr = match self.connect_to {
            Some(addr) => addr,
            None => tokio::net::lookup_host(&self.target)
                .await
                .map_err(|e| self.unreachable(e.to_string()))?
                .next()
                .ok_or_else(|| self.unreachable("the name resolves to no address".into()))?,
        };
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| self.unreachable(format!("{addr}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let tls = self
            .tls
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| self.unreachable(format!("TLS: {e}")))?;
        if tls.get_ref().1.alpn_protocol() != Some(&b"h2"[..]) {
            return Err(LinkError::NotHttp2 {
                target: self.target.clone(),
            });
        }
        let (sender, connection) = self
            .http2
            .handshake(TokioIo::new(tls))
            .await
            .map_err(|e| self.unreachable(format!("HTTP/2: {e}")))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::info!(error = %e, "link connection ended");
            }
        });
        Ok(sender)
    }

    fn unreachable(&self, detail: String) -> LinkError {
        let target = match self.connect_to {
            Some(addr) => format!("{} (connecting to {addr})", self.target),
            None => self.target.clone(),
        };
        LinkError::Unreachable { target, detail }
    }
}
