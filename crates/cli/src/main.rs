//! The `wirefold` binary: parses the command line and hands over to the crates.

mod allocator;
mod demo;
mod generate;
mod lab;
mod variants;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use client_proxy::ClientConfig;
use proxy::config::{AccessFormat, Config, ConfigError, LogFormat};
use proxy::live::{ConfigLoader, LiveConfig};

#[derive(Parser)]
#[command(
    name = "wirefold",
    version,
    about = "An HTTP accelerator: fewer bytes and fewer round trips"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The accelerator in front of an origin (--origin), serving a directory (--root),
    /// or as the server proxy of a proxy pair (--link).
    Serve(ServeArgs),
    /// A built-in sample site that changes while it runs, served through the accelerator.
    Demo {
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
    /// Analyses over corpora and traces.
    #[command(subcommand)]
    Lab(lab::LabSubcommand),
    /// Shared compression dictionaries.
    #[command(subcommand)]
    Dict(DictCommand),
    /// Adaptive fidelity's variants (image ladders, minified text).
    #[command(subcommand)]
    Variants(variants::VariantsCommand),
    /// The client proxy of a proxy pair: near the users, talking to a server proxy
    /// (`wirefold serve --link`) over one HTTP/2 connection.
    Client(ClientArgs),
    /// Fetch a URL speaking every encoding and delta wirefold serves, keeping a
    /// local cache; the body goes to stdout, a report of bytes saved to stderr.
    Get(GetArgs),
    /// Make a running server read its configuration again (as SIGHUP does) and
    /// report what changed, what needs a restart, or each error by key.
    Reload {
        /// The running server's admin listener.
        #[arg(long, default_value = "127.0.0.1:9180")]
        admin: SocketAddr,
        /// The server's admin token (`serve --admin-token`), sent as a bearer token.
        #[arg(long)]
        admin_token: Option<String>,
    },
}

#[derive(Subcommand)]
enum DictCommand {
    /// Train a dictionary over the stored pages matching a path pattern and publish
    /// it on a running server (pages it serves then announce it for first visits).
    Train {
        /// Path pattern of the pages, e.g. `/blog/*`.
        #[arg(long)]
        pattern: String,
        /// The site (upstream host) whose pages to use [default: the one served].
        #[arg(long)]
        site: Option<String>,
        /// Largest dictionary size in bytes.
        #[arg(long, default_value_t = 65536)]
        max_size: usize,
        /// The running server's admin listener.
        #[arg(long, default_value = "127.0.0.1:9180")]
        admin: SocketAddr,
        /// The server's admin token (`serve --admin-token`), sent as a bearer token.
        #[arg(long)]
        admin_token: Option<String>,
    },
}

impl DictCommand {
    async fn run(self) -> Result<(), String> {
        match self {
            DictCommand::Train {
                pattern,
                site,
                max_size,
                admin,
                admin_token,
            } => {
                let encode = |s: &str| {
                    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC)
                        .to_string()
                };
                let mut query = format!(
                    "/dictionaries/train?pattern={}&max_size={max_size}",
                    encode(&pattern)
                );
                if let Some(site) = site {
                    query.push_str(&format!("&site={}", encode(&site)));
                }
                let (status, body) = proxy::server::call_admin(
                    admin,
                    http::Method::POST,
                    &query,
                    admin_token.as_deref(),
                )
                .await?;
                if !status.is_success() {
                    return Err(body.trim().to_string());
                }
                print!("{body}");
                Ok(())
            }
        }
    }
}

/// Every flag has a config-file key of the same name (`--data-dir` is `data_dir`);
/// a flag given on the command line overrides the file.
#[derive(clap::Args)]
struct ServeArgs {
    /// Reverse-proxy mode: the origin's base URL.
    #[arg(long, conflicts_with = "root")]
    origin: Option<String>,
    /// File-server mode: the directory to serve.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Listener address [default: 127.0.0.1:8080].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Admin listener (status page, metrics, health) [default: 127.0.0.1:9180].
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Require this bearer token for admin changes (`wirefold dict train --admin-token`);
    /// without one, a non-loopback admin listener refuses them.
    #[arg(long)]
    admin_token: Option<String>,
    /// Store directory [default: ./wirefold-data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Shared store of a fleet instead of the embedded one in --data-dir:
    /// redis://HOST:PORT, redis+cluster://HOST:PORT[,HOST:PORT...], or a comma-separated
    /// list of redis://HOST:PORT cluster seed nodes.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// TOML configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Serve TLS with a certificate generated for localhost.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key"])]
    tls_self_signed: bool,
    /// PEM certificate chain.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Log format: human or json [default: human].
    #[arg(long, value_parser = ["human", "json"])]
    log_format: Option<String>,
    /// Access log: a file (reopened on SIGUSR1), or `-` for stderr (`log.access`).
    #[arg(long, value_name = "PATH")]
    access_log: Option<PathBuf>,
    /// Access log format: combined or json [default: combined] (`log.access_format`).
    #[arg(long, value_parser = ["combined", "json"])]
    access_log_format: Option<String>,
    /// Accept client proxies' links (`wirefold client`); without --origin or --root,
    /// fetch from whatever origin each link request names.
    #[arg(long)]
    link: bool,
    /// Require this token from client proxies (`wirefold client --link-token`).
    #[arg(long, requires = "link")]
    link_token: Option<String>,
    /// Validate the configuration, explain any error, and exit.
    #[arg(long)]
    check_config: bool,
}

impl ServeArgs {
    /// The configuration file with the command line's overrides, every problem
    /// named by key (and by line when the file sets it).
    fn checked_config(&self) -> Result<Config, Vec<ConfigError>> {
        let config = self.config().map_err(|e| vec![e])?;
        let problems = config.problems();
        if problems.is_empty() {
            return Ok(config);
        }
        Err(match &self.config {
            Some(path) => proxy::config::locate(problems, path),
            None => problems,
        })
    }

    fn config(&self) -> Result<Config, ConfigError> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if let Some(origin) = &self.origin {
            config.origin = Some(origin.clone());
            config.root = None;
        }
        if let Some(root) = &self.root {
            config.root = Some(root.clone());
            config.origin = None;
        }
        if let Some(v) = self.listen {
            config.listen = v;
        }
        if let Some(v) = self.admin {
            config.admin = v;
        }
        if let Some(token) = &self.admin_token {
            config.admin_token = Some(token.clone());
        }
        if let Some(v) = &self.data_dir {
            config.data_dir = v.clone();
        }
        if let Some(v) = &self.store {
            config.store = Some(v.clone());
        }
        if self.tls_self_signed {
            config.tls.self_signed = true;
            config.tls.cert = None;
            config.tls.key = None;
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            config.tls.self_signed = false;
            config.tls.cert = Some(cert.clone());
            config.tls.key = Some(key.clone());
        }
        if self.link {
            config.link.enabled = true;
        }
        if let Some(token) = &self.link_token {
            config.link.token = Some(token.clone());
        }
        if let Some(format) = &self.log_format {
            config.log_format = if format == "json" {
                LogFormat::Json
            } else {
                LogFormat::Human
            };
        }
        if let Some(path) = &self.access_log {
            config.log.access = Some(path.clone());
        }
        if let Some(format) = &self.access_log_format {
            config.log.access_format = if format == "json" {
                AccessFormat::Json
            } else {
                AccessFormat::Combined
            };
        }
        Ok(config)
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WIREFOLD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder.init(),
    }
}

fn main() -> ExitCode {
    allocator::tune();
    let matches = generate::attach(Cli::command()).get_matches();
    if let Some(generated) = generate::run(&matches, Cli::command()) {
        return exit_code(generated);
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // A server's shutdown gives in-flight and background work its grace; what still
    // runs on the blocking pool after it (a root scan's encoding, minutes of br 11 on a
    // large file) ends with the process instead of holding it up, as dropping the
    // runtime would. The store's writes are made to be cut off safely. The client
    // proxy has no grace to have spent: its short store writes are waited for.
    let leaves_strays = matches!(cli.command, Command::Serve(_) | Command::Demo { .. });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("wirefold: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::Demo { listen } => {
            init_logging(LogFormat::Human);
            runtime.block_on(demo::run(listen))
        }
        Command::Lab(cmd) => lab::run(cmd),
        Command::Dict(cmd) => runtime.block_on(cmd.run()),
        Command::Variants(cmd) => variants::run(cmd),
        Command::Client(args) => runtime.block_on(client(args)),
        Command::Get(args) => runtime.block_on(get(args)),
        Command::Reload { admin, admin_token } => runtime.block_on(reload(admin, admin_token)),
    };
    if leaves_strays {
        runtime.shutdown_timeout(std::time::Duration::ZERO);
    }
    exit_code(result)
}

fn exit_code(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("wirefold: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn reload(admin: SocketAddr, admin_token: Option<String>) -> Result<(), String> {
    let (status, body) =
        proxy::server::call_admin(admin, http::Method::POST, "/reload", admin_token.as_deref())
            .await?;
    if !status.is_success() {
        return Err(body.trim().to_string());
    }
    print!("{body}");
    Ok(())
}

/// Every problem on its own line.
fn problems_text(problems: &[ConfigError]) -> String {
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    lines.join("\n")
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let config = args.checked_config().map_err(|p| problems_text(&p))?;
    if args.check_config {
        println!("configuration is valid");
        return Ok(());
    }
    init_logging(config.log_format);
    let loader: ConfigLoader = Arc::new(move || args.checked_config());
    let running = link_server::start(LiveConfig::new(config, Some(loader)))
        .await
        .map_err(|e| e.to_string())?;
    let scheme = if running.tls { "https" } else { "http" };
    tracing::info!(listen = %format!("{scheme}://{}", running.addr), admin = %running.admin_addr, "wirefold serving");
    println!(
        "wirefold listening on {scheme}://{} (admin http://{})",
        running.addr, running.admin_addr
    );
    let shutdown = proxy::server::shutdown_signal();
    tokio::pin!(shutdown);
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hangups) => loop {
            tokio::select! {
                _ = &mut shutdown => break,
                Some(()) = hangups.recv() => {
                    // The outcome is logged by the server; a refused reload keeps serving.
                    let _ = running.reload();
                }
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: reload with `wirefold reload`");
            shutdown.await;
        }
    }
    tracing::info!("shutting down: draining in-flight requests");
    running.shutdown().await;
    Ok(())
}

/// Every flag has a config-file key of the same name (`--keep-instances` is
/// `keep_instances`); a flag given on the command line overrides the file.
#[derive(clap::Args)]
struct ClientArgs {
    /// The server proxy: https://HOST:PORT (required here or in the config file).
    #[arg(long)]
    upstream: Option<String>,
    /// Browsers' listener (forward proxy) [default: 127.0.0.1:3128].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Admin listener (metrics, health) [default: 127.0.0.1:9181].
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Where held instances live [default: ./wirefold-client-data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Hold instances on Redis instead of in --data-dir (the forms of `serve --store`).
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Reverse mode: origin-form requests go to this site (http:// or https:// URL).
    #[arg(long)]
    site: Option<String>,
    /// PEM certificates to trust for the upstream, besides the public roots.
    #[arg(long, value_name = "FILE")]
    upstream_ca: Option<PathBuf>,
    /// Connect to IP:PORT instead of resolving the upstream's host (its name is
    /// still what the certificate must match).
    #[arg(long, value_name = "ADDR")]
    upstream_connect: Option<SocketAddr>,
    /// The link token the server proxy requires.
    #[arg(long, value_name = "T")]
    link_token: Option<String>,
    /// Instances kept per URL; 0 keeps none [default: 8].
    #[arg(long, value_name = "N")]
    keep_instances: Option<usize>,
    /// TOML configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Validate the configuration, explain any error, and exit.
    #[arg(long)]
    check_config: bool,
}

impl ClientArgs {
    fn config(&self) -> Result<ClientConfig, String> {
        let mut config = match &self.config {
            Some(path) => ClientConfig::from_file(path).map_err(|e| e.to_string())?,
            None => ClientConfig::default(),
        };
        if let Some(v) = &self.upstream {
            config.upstream = v.clone();
        }
        if let Some(v) = self.listen {
            config.listen = v;
        }
        if let Some(v) = self.admin {
            config.admin = v;
        }
        if let Some(v) = &self.data_dir {
            config.data_dir = v.clone();
        }
        if let Some(v) = &self.store {
            config.store = Some(v.clone());
        }
        if let Some(v) = &self.site {
            config.site = Some(v.clone());
        }
        if let Some(v) = &self.upstream_ca {
            config.upstream_ca = Some(v.clone());
        }
        if let Some(v) = self.upstream_connect {
            config.upstream_connect = Some(v);
        }
        if let Some(v) = &self.link_token {
            config.link_token = Some(v.clone());
        }
        if let Some(v) = self.keep_instances {
            config.keep_instances = v;
        }
        Ok(config)
    }
}

async fn client(args: ClientArgs) -> Result<(), String> {
    let config = args.config()?;
    if args.check_config {
        config.check().map_err(|e| e.to_string())?;
        println!("configuration is valid");
        return Ok(());
    }
    init_logging(LogFormat::Human);
    let upstream = config.upstream.clone();
    let running = client_proxy::start(config)
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(listen = %running.addr, admin = %running.admin_addr, %upstream, "wirefold client proxy running");
    println!(
        "wirefold client proxy on http://{} (admin http://{}), link to {upstream}",
        running.addr, running.admin_addr
    );
    proxy::server::shutdown_signal().await;
    tracing::info!("shutting down: draining in-flight requests");
    running.shutdown().await;
    Ok(())
}

#[derive(clap::Args)]
struct GetArgs {
    /// The URL (http or https).
    url: String,
    /// Cache directory [default: $XDG_CACHE_HOME/wirefold, else ~/.cache/wirefold,
    /// else ./wirefold-cache].
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Write the body to FILE instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Do not fetch dictionaries announced with `Link: rel="compression-dictionary"`.
    #[arg(long)]
    no_dictionary_fetch: bool,
    /// PEM certificates to trust for https, besides the public roots.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Seconds allowed per exchange.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// No report on stderr.
    #[arg(long, conflicts_with = "json")]
    quiet: bool,
    /// The report as JSON on stderr instead of a line.
    #[arg(long)]
    json: bool,
}

async fn get(args: GetArgs) -> Result<(), String> {
    use std::io::Write;
    let cache = args.cache.clone().unwrap_or_else(get::default_cache_dir);
    let mut options = get::GetOptions::new(&args.url, cache);
    options.ca_file = args.ca_file.clone();
    options.fetch_dictionaries = !args.no_dictionary_fetch;
    options.timeout = std::time::Duration::from_secs(args.timeout);
    let report = get::run(&options).await.map_err(|e| e.to_string())?;
    match &args.output {
        Some(path) => {
            std::fs::write(path, &report.body).map_err(|e| format!("-o {}: {e}", path.display()))?
        }
        None => std::io::stdout()
            .write_all(&report.body)
            .map_err(|e| format!("stdout: {e}"))?,
    }
    if args.json {
        eprintln!("{}", report.to_json());
    } else if !args.quiet {
        eprintln!("{}", report.summary());
    }
    match report.status {
        400.. => Err(format!(
            "{}: the server answered {}",
            args.url, report.status
        )),
        _ => Ok(()),
    }
}
