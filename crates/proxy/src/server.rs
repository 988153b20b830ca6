//! Listeners: the accelerator (HTTP/1.1 and HTTP/2 — h2c by prior knowledge, or ALPN
//! over TLS) and the admin endpoint; graceful shutdown that drains in-flight requests.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use wirefold_http::host::request_host;

use crate::access_log::{AccessLog, AccessLogError};
use crate::background::{Background, Pending};
use crate::body::{self, Body};
use crate::config::Config;
use crate::conn_slots::{Slot, Slots};
use crate::files::FileSource;
use crate::first_bytes::{self, FirstBytesDeadline, Protocol};
use crate::h2_server::{H2Settings, Http2Connections};
use crate::live::{LiveConfig, ReloadError, Reloaded};
use crate::metrics::Metrics;
use crate::model::ConnInfo;
use crate::origin::Origin;
use crate::park::{self, Transport};
use crate::pipeline::fetch::Source;
use crate::pipeline::Pipeline;
use crate::record::{Delivery, RequestRecord};
use crate::recorder::{OpenRecord, Records};
use crate::shards::Shards;
use crate::status::StatusBoard;
use crate::trim;

/// Why the server could not start; each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    AccessLog(#[from] AccessLogError),
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
    #[error("store: {0}")]
    StoreLocation(#[from] store::TargetError),
    #[error("tls: {0}")]
    Tls(String),
    #[error("origin: {0}")]
    Origin(String),
    #[error("cannot watch parked connections: {0}")]
    Parking(std::io::Error),
    #[error("cannot start the connection threads: {0}")]
    Threads(std::io::Error),
    #[error("root {path}: {source}")]
    Root {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// A started server.
pub struct Running {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub tls: bool,
    pub metrics: Arc<Metrics>,
    pipeline: Arc<Pipeline>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    background: Background,
    grace: Duration,
    /// Stopped at the end of shutdown: background work may run on them.
    shards: Arc<Shards>,
}

impl Running {
    /// Reads the configuration again and applies it to new requests and connections
    /// (`SIGHUP`, `POST /reload`).
    pub fn reload(&self) -> Result<Reloaded, ReloadError> {
        self.pipeline.reload()
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.pipeline.config()
    }

    /// Stops accepting, lets in-flight requests finish within the grace period, then
    /// background work (encodes, store writes) within another, then returns with the
    /// access log written out and the store closed, unless blocking work still running
    /// at the end of the second (a large body's encoding) holds it: that is not waited
    /// for, it ends with the process, and the store's writes are made to be cut off
    /// safely.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        let background_ends = tokio::time::Instant::now() + self.grace;
        if tokio::time::timeout(self.grace, self.background.idle())
            .await
            .is_err()
        {
            tracing::warn!("background work still running at the end of the grace period");
        }
        // The accept loop, the only other holder, has ended.
        match Arc::try_unwrap(self.shards) {
            Ok(shards) => {
                let left = background_ends.saturating_duration_since(tokio::time::Instant::now());
                shards.stop(left).await;
            }
            Err(_) => tracing::warn!("connection threads still shared at shutdown: left running"),
        }
        if let Some(log) = self.pipeline.records.access_log() {
            if !log.flush(self.grace).await {
                tracing::warn!("the access log was not written out within the grace period");
            }
        }
    }
}

/// Resolves on SIGINT or SIGTERM: when a server (or a client proxy) is to
/// [shut down](Running::shutdown).
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM: only SIGINT shuts down");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// Validates the configuration, opens the store, binds both listeners and starts
/// serving. Port 0 picks a free port; `Running` tells which.
/// The server proxy's end of the link (`wirefold-link-server`): it answers the
/// requests on the main listener that carry `wirefold-link`, instead of the pipeline.
pub trait LinkEndpoint: Send + Sync {
    /// Called with each accepted connection's socket, before its first request.
    fn accepted(&self, socket: std::os::fd::RawFd);
    /// Answers one link request.
    fn serve(
        self: Arc<Self>,
        req: Request<Body>,
        conn: ConnInfo,
    ) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>>;
}

/// Makes the link endpoint once the pipeline it runs exchanges through exists.
pub type LinkEndpointFactory = Box<dyn FnOnce(Arc<Pipeline>) -> Arc<dyn LinkEndpoint> + Send>;

/// Starts a server without a link endpoint: link requests are refused.
pub async fn start(config: Config) -> Result<Running, StartError> {
    start_with(config, None).await
}

/// Starts a server; `link` answers link requests when `link.enabled` is set. A
/// [`LiveConfig`] with a loader can be [reloaded](Running::reload).
pub async fn start_with(
    config: impl Into<LiveConfig>,
    link: Option<LinkEndpointFactory>,
) -> Result<Running, StartError> {
    let live = Arc::new(config.into());
    let config = live.current();
    config.check()?;
    let metrics = Arc::new(Metrics::new());
    let access_log = AccessLog::start(&config.log, metrics.access_log.clone())?;
    let records = Arc::new(Records::new(StatusBoard::default(), access_log.clone()));
    let store = if config.cache.enabled {
        let store_config = store::StoreConfig {
            max_bytes: config.cache.max_bytes,
            memory_bytes: config.cache.memory_bytes,
            max_object_bytes: config.limits.max_buffered_body as u64,
        };
        let location = config.store_location()?;
        let observer: Option<store::StateObserver> = match location {
            store::StoreLocation::Shared { .. } => {
                // Assumed reachable until a call says otherwise; the gauge starts there.
                metrics.shared_store_is(store::SharedState::Available);
                let metrics = metrics.clone();
                Some(Arc::new(move |state| metrics.shared_store_entered(state)))
            }
            store::StoreLocation::Embedded(_) => None,
        };
        let opened = delta::blocking::run({
            let location = location.clone();
            move || store::Store::open_at(&location, store_config, observer)
        })
        .await;
        Some(opened.map_err(|source| StartError::Store { location, source })?)
    } else {
        None
    };
    let source = match (&config.origin, &config.root) {
        (Some(origin), _) => Source::Origin(Arc::new(
            Origin::new(origin, &config.upstream).map_err(StartError::Origin)?,
        )),
        (None, Some(root)) => Source::Files(Box::new(
            FileSource::new(root, config.files.serve_dotfiles).map_err(|source| {
                StartError::Root {
                    path: root.clone(),
                    source,
                }
            })?,
        )),
        (None, None) => Source::Forward(Box::new(
            crate::forward::ForwardOrigins::new(&config.upstream, config.link.destinations)
                .map_err(StartError::Origin)?,
        )),
    };
    let tls = if config.tls.enabled() {
        Some(crate::tls::acceptor(&config.tls, &config.data_dir).map_err(StartError::Tls)?)
    } else {
        None
    };

    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
    let admin_listener =
        TcpListener::bind(config.admin)
            .await
            .map_err(|source| StartError::Bind {
                addr: config.admin,
                source,
            })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.listen,
        source,
    })?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|source| StartError::Bind {
            addr: config.admin,
            source,
        })?;

    let pipeline = Arc::new(Pipeline::new(
        live,
        source,
        store,
        metrics.clone(),
        records.clone(),
    ));
    pipeline.start_tasks();
    let background = pipeline.background.clone();
    let grace = Duration::from_millis(config.limits.shutdown_grace_ms);
    let (stop, stopped) = watch::channel(false);
    crate::scan::start(pipeline.clone(), stopped.clone());
    let (parked, parked_events) = park::Lot::new(&metrics).map_err(StartError::Parking)?;
    let shards = Arc::new(Shards::start(config.connection_threads).map_err(StartError::Threads)?);
    let front = Front {
        link: link
            .filter(|_| config.link.enabled)
            .map(|make| make(pipeline.clone())),
        pipeline: pipeline.clone(),
        parked,
        http2: Arc::new(Http2Connections::new(metrics.http2_closed_for_room.clone())),
        freed: trim::FreedByParks::default(),
    };
    let main = tokio::spawn(accept_loop(
        listener,
        tls.clone(),
        Arc::new(front),
        shards.clone(),
        parked_events,
        stopped.clone(),
    ));
    let admin_header_timeout = Duration::from_millis(config.limits.header_timeout_ms);
    let reloads = pipeline.clone();
    let mut tasks = Vec::with_capacity(3);
    let reopening =
        access_log.and_then(|log| crate::access_log::reopen_on_signal(log, stopped.clone()));
    tasks.extend(reopening);
    let admin = tokio::spawn(admin_loop(
        admin_listener,
        admin_header_timeout,
        stopped,
        move |req| {
            let pipeline = pipeline.clone();
            async move { admin(&pipeline, req).await }
        },
    ));
    tasks.extend([main, admin]);
    Ok(Running {
        addr,
        admin_addr,
        tls: tls.is_some(),
        metrics,
        pipeline: reloads,
        stop,
        tasks,
        background,
        grace,
        shards,
    })
}

/// What hyper needs of the configuration for one connection, taken when it arrives (a
/// reload applies to new connections).
#[derive(Clone, Copy)]
struct ConnectionLimits {
    header_timeout: Duration,
    max_header_bytes: usize,
}

impl ConnectionLimits {
    fn of(config: &Config) -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_millis(config.limits.header_timeout_ms),
            max_header_bytes: config.limits.max_header_bytes,
        }
    }
}

/// Serves a connection that did not choose `h2` by ALPN: HTTP/1.1 (with upgrades) on
/// hyper, or HTTP/2 when it opens with the preface (h2c by prior knowledge). Once
/// `stop` turns true, the request in flight finishes and the connection closes.
///
/// Spawned as the task itself, not wrapped in another `async` block: rustc would keep
/// the wrapped future twice over (the captured one and the one being awaited).
async fn serve_unnegotiated<I: Transport>(
    io: I,
    served: Served,
    // Held until the connection ends, parked or not.
    open: Open,
) {
    // Boxed: its state (the timer and the first bytes) is needed only until the
    // protocol is told, and inline it would stay in the connection's task for good.
    // The waits are scoped so that their space is reused by what serves the protocol.
    let sniffed = {
        let sniffing = Box::pin(first_bytes::sniff(io, served.limits.header_timeout));
        tokio::select! {
            sniffed = sniffing => sniffed,
            () = stop_requested(served.stop.clone()) => return,
        }
    };
    let (protocol, io) = match sniffed {
        Ok(told) => told,
        Err(e) => return tracing::debug!(error = %e, "connection ended before its first request"),
    };
    match protocol {
        Protocol::Http2 => serve_h2c(io, served).await,
        // HTTP/1.1: hyper serves the connection while it is busy; once idle it is
        // parked as its bare socket and served by a new hyper connection when bytes
        // arrive (`park`).
        Protocol::Http1 => serve_http1(io, bytes::Bytes::new(), served, Arc::new(open)).await,
    }
}

/// Serves an accepted plain-TCP connection on the connection thread polling this.
async fn serve_plain(socket: std::net::TcpStream, served: Served, open: Open) {
    if let Some(stream) = on_this_thread(socket) {
        serve_unnegotiated(stream, served, open).await;
    }
}

/// Serves a parked HTTP/1.1 connection again, on the connection thread polling this.
async fn serve_parked(socket: std::net::TcpStream, served: Served, open: Arc<Open>) {
    if let Some(stream) = on_this_thread(socket) {
        serve_http1(stream, bytes::Bytes::new(), served, open).await;
    }
}

/// What an accepted connection holds until it closes, wherever it is (served by a
/// task, parked, upgraded and copied to the origin): shutdown's wait for it, and its
/// place among `limits.max_connections`.
struct Open {
    _pending: Pending,
    _slot: Slot,
}

/// Registers `socket` with the event loop of the thread that calls this.
fn on_this_thread(socket: std::net::TcpStream) -> Option<TcpStream> {
    TcpStream::from_std(socket)
        .inspect_err(|e| tracing::debug!(error = %e, "a connection could not be watched"))
        .ok()
}

/// What serving a connection needs besides its transport.
struct Served {
    front: Arc<Front>,
    conn: ConnInfo,
    limits: ConnectionLimits,
    stop: watch::Receiver<bool>,
}

/// Serves HTTP/2 by prior knowledge (h2c, or TLS without ALPN) on the same server as
/// TLS's `h2`: one HTTP/2 implementation, with its 103s, push, idle close and reset
/// handling, whatever the client's way in.
async fn serve_h2c<I: Transport>(io: I, served: Served) {
    let settings = h2_settings(&served.front.pipeline.config(), &served.front);
    // Boxed: inline, HTTP/2's larger state would size the task of every HTTP/1.1
    // connection too.
    Box::pin(crate::h2_server::serve(
        io,
        settings,
        served.front,
        served.conn,
        served.stop,
    ))
    .await;
}

/// The HTTP/2 settings of a connection arriving under `config`.
fn h2_settings(config: &Config, front: &Front) -> H2Settings {
    H2Settings {
        max_header_list_size: config.limits.max_header_bytes as u32,
        http2: config.http2.clone(),
        connections: front.http2.clone(),
    }
}

/// Serves an HTTP/1.1 connection with hyper until it ends or parks; parked, it waits
/// in the listener's `park::Lot`, without a task, and this task ends. The fields of
/// `served` are used in place: moved out, they would take space in the task twice.
async fn serve_http1<I: Transport>(
    io: I,
    mut read_ahead: bytes::Bytes,
    served: Served,
    open: Arc<Open>,
) {
    let mut stopping = std::pin::pin!(stop_requested(served.stop.clone()));
    let mut io = io;
    loop {
        let exchanges = Arc::new(park::Exchanges::default());
        let service = {
            let (front, conn, exchanges) = (served.front.clone(), served.conn, exchanges.clone());
            let open = open.clone();
            service_fn(move |mut req: Request<Incoming>| {
                let front = front.clone();
                let answer = exchanges.start(&req);
                // An upgraded connection leaves this task for the upgrade's copy,
                // which takes the hold along (`upgrade::pass_through`).
                if req.headers().contains_key(http::header::UPGRADE) {
                    req.extensions_mut()
                        .insert(crate::upgrade::ConnectionHold::new(open.clone()));
                }
                // Boxed: hyper keeps the service's future inside the connection, so
                // unboxed, every busy connection would hold the space of a whole
                // pipeline run (docs/benchmarks.md, "Idle connections").
                Box::pin(async move {
                    let response = dispatch(&front, req.map(body::boxed), conn).await;
                    Ok::<_, Infallible>(response.map(|body| park::Answered::new(body, answer)))
                })
            })
        };
        let parking = park::Parking::new(io, read_ahead, exchanges);
        // Boxed: so that it is freed when it ends. With upgrades: an upgrade takes the
        // IO out of hyper (and `into_parts` then says `None`); `Parking` never parks a
        // connection that asked for one.
        let mut connection = Box::new(
            hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(served.limits.header_timeout)
                .max_buf_size(served.limits.max_header_bytes)
                // The head's own limit, exact: `max_buf_size` alone lets a head through
                // when the buffer, grown by doubling, happens to hold it whole.
                .max_header_size(served.limits.max_header_bytes)
                .serve_connection(TokioIo::new(parking), service)
                .with_upgrades(),
        );
        tokio::select! {
            ended = Pin::new(&mut *connection) => {
                if ended.is_err() {
                    return;
                }
            }
            () = stopping.as_mut() => {
                Pin::new(&mut *connection).graceful_shutdown();
                let _ = Pin::new(&mut *connection).await;
                return;
            }
        }
        // Neither the box hyper's connection was in (a box moved out of is freed only
        // with its binding) nor `parts` (its service, its read buffer) is to be held
        // while parked: both end here.
        let (parked, read_buf) = match unbox(connection).into_parts() {
            None => return, // upgraded: the upgrade's copy owns the stream now
            Some(parts) => (parts.io.into_inner().into_parked(), parts.read_buf),
        };
        let Some((parked, idle_since)) = parked else {
            return; // the client closed, or hyper closed (`Connection: close`)
        };
        io = parked;
        if !read_buf.is_empty() {
            read_ahead = read_buf;
            continue; // bytes hyper had read go to the next hyper connection at once
        }
        // Empty, it still holds hyper's 8 KiB read buffer.
        drop(read_buf);
        let Some(socket) = io.into_socket() else {
            return;
        };
        // The same idle limit as hyper's header timer, counted from the same moment.
        let deadline = idle_since + served.limits.header_timeout;
        let with = ParkedWith {
            conn: served.conn,
            limits: served.limits,
            open,
        };
        served.front.parked.park(socket, deadline, with);
        served.front.freed.parked();
        return;
    }
}

/// What serving a parked connection again needs besides its socket.
struct ParkedWith {
    conn: ConnInfo,
    limits: ConnectionLimits,
    // Shutdown waits for parked connections too (the lot closes them at once).
    open: Arc<Open>,
}

/// The value in `boxed`, its box freed at once.
#[allow(
    clippy::boxed_local,
    reason = "the point: the box is freed when this returns, not with the caller's binding"
)]
fn unbox<T>(boxed: Box<T>) -> T {
    *boxed
}

/// Resolves once `stop` turns true (or its sender is gone): then a connection is asked
/// to shut down gracefully, and still driven, so the request in flight gets its answer.
// Not inlined into its caller, which is generic: there, proving the wait `Send` trips
// over the compiler's higher-ranked lifetimes ("not general enough").
async fn stop_requested(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|&stopping| stopping).await;
}

/// What answers requests on the main listener: the pipeline, and the server proxy's
/// end of the link when links are accepted.
struct Front {
    pipeline: Arc<Pipeline>,
    link: Option<Arc<dyn LinkEndpoint>>,
    /// The listener's parked HTTP/1.1 connections.
    parked: park::Lot<ParkedWith>,
    /// The listener's HTTP/2 connections.
    http2: Arc<Http2Connections>,
    freed: trim::FreedByParks,
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    front: Arc<Front>,
    // Where connections are served (not in `Front`: the connections' tasks hold that,
    // and the threads would then outlive the server).
    shards: Arc<Shards>,
    parked_events: park::LotEvents,
    mut stop: watch::Receiver<bool>,
) {
    let pipeline = &front.pipeline;
    // Every connection's task; shutdown waits for them (each stops on `stop`).
    let connections = Background::default();
    let slots = {
        let open_files = crate::conn_slots::raise_open_files_limit();
        let max = match pipeline.config().limits.max_connections {
            0 => crate::conn_slots::default_max(open_files),
            max => max,
        };
        tracing::debug!(max_connections = max, open_files, "connection limit");
        let metrics = &pipeline.metrics;
        Slots::new(
            max,
            metrics.connections_open.clone(),
            metrics.connection_limit_waits.clone(),
        )
    };
    let watching_parked = {
        let (front, shards, stop) = (front.clone(), shards.clone(), stop.clone());
        tokio::spawn(async move {
            let again = |socket, with: ParkedWith| {
                let served = Served {
                    front: front.clone(),
                    conn: with.conn,
                    limits: with.limits,
                    stop: stop.clone(),
                };
                shards.spawn(serve_parked(socket, served, with.open));
            };
            front.parked.watch(parked_events, stop.clone(), again).await;
        })
    };
    let giving_back = {
        let (front, stop) = (front.clone(), stop.clone());
        tokio::spawn(async move { front.freed.give_back(&front.pipeline.metrics, stop).await })
    };
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        // A place for it. At the limit, idle keep-alive connections give way to it (as
        // nginx's reusable connections do at `worker_connections`); until one is free
        // it waits unserved, the only one beyond the limit, and nothing more is
        // accepted (the kernel's backlog holds the next ones).
        let free = tokio::select! {
            free = slots.free(|| {
                if front.parked.make_room() == 0 {
                    front.http2.make_room();
                }
            }) => free,
            _ = stop.changed() => break,
        };
        let slot = slots.take(free);
        let _ = stream.set_nodelay(true);
        // Handed to its connection thread as the bare socket, to be watched there.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "an accepted connection could not be handed over");
                continue;
            }
        };
        // Each connection takes the limits in force when it arrives (a reload applies
        // to new connections).
        let config = pipeline.config();
        let limits = ConnectionLimits::of(&config);
        let handshake_timeout = limits.header_timeout;
        let socket = std::os::fd::AsRawFd::as_raw_fd(&stream);
        if let Some(link) = &front.link {
            link.accepted(socket);
        }
        let conn = ConnInfo {
            peer,
            tls: tls.is_some(),
            socket: Some(socket),
        };
        match &tls {
            None => {
                let open = Open {
                    _pending: connections.pending(),
                    _slot: slot,
                };
                let served = Served {
                    front: front.clone(),
                    conn,
                    limits,
                    stop: stop.clone(),
                };
                shards.spawn(serve_plain(stream, served, open));
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let (served_front, stop) = (front.clone(), stop.clone());
                let h2_settings = h2_settings(&config, &front);
                // Shutdown waits for the task while it holds `open` (to its end).
                let open = Open {
                    _pending: connections.pending(),
                    _slot: slot,
                };
                shards.spawn(async move {
                    let Some(stream) = on_this_thread(stream) else {
                        return;
                    };
                    let stream = match tokio::time::timeout(
                        handshake_timeout,
                        acceptor.accept(stream),
                    )
                    .await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            return tracing::debug!(%peer, error = %e, "tls handshake failed")
                        }
                        Err(_) => return tracing::debug!(%peer, "tls handshake timed out"),
                    };
                    if stream.get_ref().1.alpn_protocol() == Some(&b"h2"[..]) {
                        // HTTP/2 on the `h2` crate's server: it can send 103 Early Hints.
                        let stream = FirstBytesDeadline::new(stream, handshake_timeout);
                        crate::h2_server::serve(stream, h2_settings, served_front, conn, stop)
                            .await;
                    } else {
                        let served = Served {
                            front: served_front,
                            conn,
                            limits,
                            stop,
                        };
                        serve_unnegotiated(stream, served, open).await;
                    }
                });
            }
        }
    }
    drop(listener);
    // Parked connections closed (at once) before the wait for the others.
    let _ = watching_parked.await;
    let _ = giving_back.await;
    let grace = Duration::from_millis(pipeline.config().limits.shutdown_grace_ms);
    if tokio::time::timeout(grace, connections.idle())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace period over; dropping the remaining connections");
    }
}

impl crate::h2_server::Responder for Front {
    fn early_hints(
        &self,
        req: &Request<Body>,
        conn: ConnInfo,
    ) -> Pin<Box<dyn Future<Output = Option<http::HeaderMap>> + Send + '_>> {
        // Link requests are the link's business, not a page's.
        let is_link = req
            .headers()
            .contains_key(link_protocol::frame::LINK_HEADER);
        let ctx = (!is_link)
            .then(|| self.pipeline.early_hints_context(req, conn))
            .flatten();
        Box::pin(async move { self.pipeline.early_hints(ctx?).await })
    }

    fn respond(
        self: Arc<Self>,
        req: Request<Body>,
        conn: ConnInfo,
    ) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
        Box::pin(async move { dispatch(&self, req, conn).await })
    }
}

async fn dispatch(front: &Front, req: Request<Body>, conn: ConnInfo) -> Response<Body> {
    let pipeline = &front.pipeline;
    // What the pipeline (or the link) does not answer is recorded here.
    let outside = |req: &Request<Body>, delivery: Delivery| {
        let record = RequestRecord::arriving(req, conn);
        let record = OpenRecord::new(record, Instant::now(), pipeline.records.clone());
        record.deliver(delivery);
        record
    };
    if req
        .headers()
        .contains_key(link_protocol::frame::LINK_HEADER)
    {
        return match &front.link {
            Some(link) => link.clone().serve(req, conn).await,
            None => outside(&req, Delivery::error(None)).watch(refuse_link(pipeline, &req)),
        };
    }
    match pipeline.fetcher.source() {
        Source::Origin(origin)
            if wirefold_http::hop_by_hop::is_upgrade_request(req.headers()).is_some() =>
        {
            // Upgrades skip the pipeline, not its host rule (RFC 9112 §3.2).
            if let Err(e) = request_host(req.version(), req.uri(), req.headers()) {
                let refused = crate::body::error_response(StatusCode::BAD_REQUEST, &e.to_string());
                return outside(&req, Delivery::error(None)).watch(refused);
            }
            let record = outside(&req, Delivery::default());
            return record.watch(crate::upgrade::pass_through(origin, req, conn).await);
        }
        Source::Forward(_) => {
            let refused = crate::body::error_response(
                StatusCode::BAD_REQUEST,
                "this server proxy answers link requests (wirefold-link) only",
            );
            return outside(&req, Delivery::error(None)).watch(refused);
        }
        _ => {}
    }
    pipeline.handle(req, conn).await
}

/// Serves a plain HTTP/1.1 admin endpoint (metrics, health) with `handler` until
/// `stop` changes. Shared by the server and the client proxy. A client must send a
/// whole request head within `header_timeout` (from the moment it connects), as on
/// the main listener: otherwise a few silent connections would hold the admin
/// endpoint's sockets forever.
pub async fn admin_loop<H, F>(
    listener: TcpListener,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
    handler: H,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let handler = handler.clone();
        let service = service_fn(move |req: Request<Incoming>| {
            let answer = handler(req);
            async move { Ok::<_, Infallible>(answer.await) }
        });
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(body::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    r
}

/// The refusal for an admin request that may not change the server, if it may not.
fn refuse_change(pipeline: &Pipeline, req: &Request<Incoming>) -> Option<Response<Body>> {
    let authorization = req.headers().get(http::header::AUTHORIZATION);
    let config = pipeline.config();
    let (status, why) = authorize_admin_change(
        config.admin.ip(),
        config.admin_token.as_deref(),
        authorization,
    )
    .err()?;
    let mut refused = text(status, "text/plain", format!("{why}\n"));
    if status == StatusCode::UNAUTHORIZED {
        refused.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
    }
    Some(refused)
}

async fn admin(pipeline: &Pipeline, req: Request<Incoming>) -> Response<Body> {
    match req.uri().path() {
        "/" => {
            let page = crate::status::page(
                pipeline.records.board(),
                &pipeline.metrics,
                &pipeline.config(),
            );
            let mut page = text(StatusCode::OK, "text/html; charset=utf-8", page);
            page.headers_mut().insert(
                http::header::CONTENT_SECURITY_POLICY,
                http::HeaderValue::from_static(crate::status::PAGE_POLICY),
            );
            page
        }
        "/status.js" => text(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            crate::status::PAGE_SCRIPT.into(),
        ),
        "/status.json" => text(
            StatusCode::OK,
            "application/json",
            crate::status::status_json(
                pipeline.records.board(),
                &pipeline.metrics,
                &pipeline.config(),
            ),
        ),
        "/healthz" => text(StatusCode::OK, "text/plain", "ok\n".into()),
        "/metrics" => {
            if let Some(store) = pipeline.store().cloned() {
                if let Ok(stats) = tokio::task::spawn_blocking(move || store.stats()).await {
                    pipeline.metrics.store_sampled(&stats);
                }
            }
            match pipeline.metrics.encode() {
                Ok(metrics) => text(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    metrics,
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "metrics could not be encoded");
                    let why = "metrics could not be encoded\n".to_string();
                    text(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", why)
                }
            }
        }
        "/dictionaries/train" if req.method() == http::Method::POST => {
            if let Some(refused) = refuse_change(pipeline, &req) {
                return refused;
            }
            match train_dictionary(pipeline, req.uri().query().unwrap_or("")).await {
                Ok(report) => text(StatusCode::OK, "application/json", report),
                Err(message) => text(
                    StatusCode::BAD_REQUEST,
                    "text/plain",
                    format!("{message}\n"),
                ),
            }
        }
        "/reload" if req.method() == http::Method::POST => {
            if let Some(refused) = refuse_change(pipeline, &req) {
                return refused;
            }
            match pipeline.reload() {
                Ok(reloaded) => text(
                    StatusCode::OK,
                    "application/json",
                    format!("{}\n", serde_json::json!(reloaded)),
                ),
                Err(e @ ReloadError::NoSource) => {
                    text(StatusCode::NOT_IMPLEMENTED, "text/plain", format!("{e}\n"))
                }
                Err(e) => text(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "text/plain",
                    format!("{e}\n"),
                ),
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try / (status page), /status.json, /metrics, /healthz, POST /dictionaries/train or POST /reload\n".into(),
        ),
    }
}

/// Whether an admin request that changes the server (`POST /dictionaries/train`)
/// may proceed, from the admin listener's address, the configured `admin_token` and
/// the request's `Authorization`. A configured token is always required, as
/// `Bearer <token>` (compared in constant time); without one, only a loopback admin
/// listener accepts changes: anyone who reaches a wider address could otherwise make
/// the server train and publish dictionaries. Reads (`/metrics`, `/healthz`) stay open.
pub fn authorize_admin_change(
    admin: IpAddr,
    token: Option<&str>,
    authorization: Option<&http::HeaderValue>,
) -> Result<(), (StatusCode, &'static str)> {
    match token {
        Some(token) => {
            let presented = authorization
                .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "))
                .unwrap_or_default();
            if crate::secret::same_secret(presented, token.as_bytes()) {
                Ok(())
            } else {
                Err((
                    StatusCode::UNAUTHORIZED,
                    "wrong or missing admin token: send `Authorization: Bearer <admin_token>` (wirefold dict train --admin-token)",
                ))
            }
        }
        None if admin.is_loopback() => Ok(()),
        None => Err((
            StatusCode::FORBIDDEN,
            "this admin listener is not on loopback: set `admin_token` (--admin-token) to allow changes",
        )),
    }
}

/// `POST /dictionaries/train?pattern=P[&site=S][&max_size=N]`: trains and publishes a
/// shared dictionary (see `delta::training`). The site defaults to the one served.
async fn train_dictionary(pipeline: &Pipeline, query: &str) -> Result<String, String> {
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| {
                percent_encoding::percent_decode_str(&v.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            })
    };
    let pattern = param("pattern")
        .filter(|p| p.starts_with('/'))
        .ok_or("`pattern` (an absolute path pattern such as /blog/*) is required")?;
    let max_size = match param("max_size") {
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| format!("`max_size` {v} is not a number"))?,
        None => 64 * 1024,
    };
    if !(1024..=16 << 20).contains(&max_size) {
        return Err("`max_size` must be between 1024 and 16 MiB".into());
    }
    let site = match (param("site"), pipeline.fetcher.source()) {
        (Some(site), _) => site,
        (None, Source::Origin(origin)) => origin
            .upstream_host(None)
            .to_str()
            .unwrap_or_default()
            .to_string(),
        (None, Source::Files(_)) => "root".to_string(),
        (None, Source::Forward(_)) => {
            return Err("`site` is required: a server proxy serves many".into())
        }
    };
    let store = pipeline
        .store()
        .cloned()
        .ok_or("the cache (and so the store) is disabled")?;
    let trained = tokio::task::spawn_blocking(move || {
        delta::training::train(&store, &site, &pattern, max_size)
    })
    .await
    .map_err(|e| e.to_string())??;
    Ok(serde_json::to_string_pretty(&trained).map_err(|e| e.to_string())? + "\n")
}

/// A request to a running server's admin listener (for CLI commands that act on a
/// live server: its store belongs to that process), with `Authorization: Bearer` when
/// an admin token is given. Returns status and body text.
pub async fn call_admin(
    admin: SocketAddr,
    method: http::Method,
    path_and_query: &str,
    admin_token: Option<&str>,
) -> Result<(StatusCode, String), String> {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(admin)
        .await
        .map_err(|e| format!("admin listener {admin}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path_and_query)
        .header(http::header::HOST, admin.to_string());
    if let Some(token) = admin_token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request.body(body::empty()).map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("admin listener {admin}: {e}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// Answers a link request to a server that does not accept links.
fn refuse_link<B>(pipeline: &Pipeline, req: &Request<B>) -> Response<Body> {
    let status = StatusCode::NOT_FOUND;
    pipeline
        .metrics
        .record_request(req.method(), status, Duration::ZERO);
    body::error_response(
        status,
        "this server does not accept links (start it with --link)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> http::HeaderValue {
        http::HeaderValue::from_str(&format!("Bearer {token}")).unwrap()
    }

    #[test]
    fn admin_changes_need_loopback_or_the_token() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let loopback6: IpAddr = "::1".parse().unwrap();
        let network: IpAddr = "0.0.0.0".parse().unwrap();
        let lan: IpAddr = "192.0.2.7".parse().unwrap();
        // No token configured: loopback only.
        assert!(authorize_admin_change(loopback, None, None).is_ok());
        assert!(authorize_admin_change(loopback6, None, None).is_ok());
        for ip in [network, lan] {
            let refused = authorize_admin_change(ip, None, Some(&bearer("guess")));
            assert_eq!(refused.unwrap_err().0, StatusCode::FORBIDDEN, "{ip}");
        }
        // A configured token is required everywhere, loopback included.
        for ip in [loopback, network, lan] {
            assert!(authorize_admin_change(ip, Some("s3cret"), Some(&bearer("s3cret"))).is_ok());
            for presented in [
                None,
                Some(bearer("s3cre")),
                Some(bearer("s3cret2")),
                Some(http::HeaderValue::from_static("s3cret")),
                Some(http::HeaderValue::from_static("Basic s3cret")),
            ] {
                let refused = authorize_admin_change(ip, Some("s3cret"), presented.as_ref());
                assert_eq!(
                    refused.unwrap_err().0,
                    StatusCode::UNAUTHORIZED,
                    "{ip} {presented:?}"
                );
            }
        }
    }
}
