//! `wirefold lab link`: a network path emulator with packet-level delay, rate and a
//! drop-tail queue, for a kernel without netem (docs/link-emulator.md). The command
//! keeps its name; in Rust, "link" means only the proxy pair's link, so this is the
//! emulator of a network path ([`EmulatedPath`]).
//!
//! A command runs in a network namespace whose only route is a point-to-point /30 on a
//! TUN device; a second TUN device on the host side carries the other end. The
//! `mover` thread moves IP packets between the two, each direction through its own
//! serializer (rate), bounded buffer (queue) and delay line (one-way delay), as
//! Mahimahi's link and delay shells do. The endpoints' TCP stacks see the real round
//! trip and bottleneck, so slow start and window growth are emulated too.

mod mover;
mod tun;

use std::ffi::OsStr;
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::Duration;

pub use mover::{DirectionCounts, Shape};

/// The environment variable holding the host side's address, inside the namespace.
pub const HOST_ENV: &str = "WIREFOLD_LINK_HOST";
/// The environment variable holding the namespace side's own address.
pub const CLIENT_ENV: &str = "WIREFOLD_LINK_CLIENT";
/// The default drop-tail buffer per direction, in packets.
pub const DEFAULT_QUEUE: usize = 100;
/// The MTU of both TUN devices.
pub const MTU: usize = 1500;

/// The slowest and fastest rates accepted (bits per second).
const MIN_RATE: u64 = 1_000;
const MAX_RATE: u64 = 10_000_000_000;
/// The longest one-way delay accepted.
const MAX_DELAY: Duration = Duration::from_secs(10);
/// The largest buffer accepted, in packets.
const MAX_QUEUE: usize = 1_000_000;
/// The paths' /30s are carved from 100.64.0.0/18 (shared address space, RFC 6598), one
/// per running path: index i uses 100.64.0.0 + 4i (+1 host side, +2 namespace side).
const SLOTS: u32 = 4096;

/// `wirefold lab link --rate R --delay D [--queue N] -- COMMAND…`
#[derive(Debug, Clone, clap::Args)]
pub struct EmulatorArgs {
    /// Rate of each direction in bits per second: `28.8kbit`, `1.6mbit`, `100mbit`,
    /// `1gbit` (units bit, kbit, mbit, gbit; k = 1000).
    #[arg(long, value_parser = parse_rate, value_name = "RATE")]
    pub rate: u64,
    /// One-way delay of each direction: `75ms`, `0.16s`, `500us` (a round trip is twice it).
    #[arg(long, value_parser = parse_delay, value_name = "DELAY")]
    pub delay: Duration,
    /// Drop-tail buffer of each direction, in packets (waiting or being serialized).
    #[arg(long, value_parser = parse_queue, default_value_t = DEFAULT_QUEUE, value_name = "PACKETS")]
    pub queue: usize,
    /// The command to run behind the link; it reaches the host side at $WIREFOLD_LINK_HOST.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl EmulatorArgs {
    /// The same shape for both directions.
    pub fn shape(&self) -> Shape {
        Shape {
            rate_bps: self.rate,
            delay: self.delay,
            queue: self.queue,
        }
    }
}

/// Parses a rate in bits per second with a tc-style unit: `bit`, `kbit`, `mbit`, `gbit`.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let multiplier: f64 = match unit {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "" => return Err(format!("`--rate {text}`: give a unit: kbit, mbit or gbit (bits per second)")),
        "bps" | "kbps" | "mbps" | "gbps" | "b" | "kb" | "mb" | "gb" | "kib" | "mib" | "kibit" | "mibit" => {
            return Err(format!(
                "`--rate {text}`: use kbit, mbit or gbit (bits per second; in tc, `mbps` means megabytes per second)"
            ))
        }
        _ => return Err(format!("`--rate {text}`: use kbit, mbit or gbit, e.g. `1.6mbit`")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`--rate {text}`: not a number followed by kbit, mbit or gbit"))?;
    let bps = (value * multiplier).round();
    if !(bps >= MIN_RATE as f64 && bps <= MAX_RATE as f64) {
        return Err(format!("`--rate {text}`: must be between 1kbit and 10gbit"));
    }
    Ok(bps as u64)
}

/// Parses a one-way delay: `us`, `ms` or `s`.
pub fn parse_delay(text: &str) -> Result<Duration, String> {
    let t = text.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let seconds_per_unit = match unit {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "" => {
            return Err(format!(
                "`--delay {text}`: give a unit: us, ms or s, e.g. `75ms`"
            ))
        }
        _ => return Err(format!("`--delay {text}`: use us, ms or s, e.g. `75ms`")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`--delay {text}`: not a number followed by us, ms or s"))?;
    let seconds = value * seconds_per_unit;
    if !(0.0..=MAX_DELAY.as_secs_f64()).contains(&seconds) {
        return Err(format!(
            "`--delay {text}`: must be between 0 and 10s one way"
        ));
    }
    Ok(Duration::from_nanos((seconds * 1e9).round() as u64))
}

/// Parses a buffer size in packets.
pub fn parse_queue(text: &str) -> Result<usize, String> {
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("`--queue {text}`: a number of packets, e.g. 100"))?;
    if !(1..=MAX_QUEUE).contains(&n) {
        return Err(format!(
            "`--queue {text}`: must be between 1 and {MAX_QUEUE} packets"
        ));
    }
    Ok(n)
}

/// Why the emulated path could not be set up or the command not run.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("lab link needs root (CAP_NET_ADMIN) to create network namespaces and TUN devices")]
    NotRoot,
    #[error("`{command}` failed: {message}")]
    Ip { command: String, message: String },
    #[error("no free slot: {SLOTS} namespaces wflink0…wflink{} exist (stale ones: `ip netns del wflinkN`)", SLOTS - 1)]
    NoSlot,
    #[error("TUN device {name}: {source}")]
    Tun {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("starting the packet mover: {0}")]
    Mover(#[source] io::Error),
    #[error("running {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: io::Error,
    },
    #[error("interrupted while setting up the emulated path")]
    Interrupted,
}

fn ip(args: &[&str]) -> Result<(), EmulatorError> {
    let command = format!("ip {}", args.join(" "));
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| EmulatorError::Ip {
            command: command.clone(),
            message: format!("{e} (is iproute2 installed?)"),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(EmulatorError::Ip { command, message })
    }
}

/// A running emulated path. Dropping it stops the mover, closes the TUN devices (which
/// deletes them), ends what is left running in the namespace and deletes the namespace.
pub struct EmulatedPath {
    slot: u32,
    namespace: String,
    host: Ipv4Addr,
    client: Ipv4Addr,
    shape: Shape,
    // Field order is drop order: the mover stops before the devices close.
    mover: Option<mover::Mover>,
    tuns: Vec<OwnedFd>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl EmulatedPath {
    /// Creates the namespace, the two TUN devices and their addresses, and starts the
    /// mover with `shape` in both directions.
    pub fn start(shape: Shape) -> Result<EmulatedPath, EmulatorError> {
        EmulatedPath::start_asymmetric(shape, shape)
    }

    /// As [`EmulatedPath::start`], with a different shape for each direction: `up` carries
    /// packets from the namespace to the host side, `down` the other way.
    pub fn start_asymmetric(up: Shape, down: Shape) -> Result<EmulatedPath, EmulatorError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(EmulatorError::NotRoot);
        }
        let first = (std::process::id().wrapping_mul(2_654_435_761) >> 8)
            .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed) * 7);
        let mut claimed = None;
        for i in 0..SLOTS {
            let slot = first.wrapping_add(i) % SLOTS;
            let namespace = format!("wflink{slot}");
            // `ip netns add` creates /run/netns/NAME exclusively: it is the slot's lock.
            match ip(&["netns", "add", &namespace]) {
                Ok(()) => {
                    claimed = Some((slot, namespace));
                    break;
                }
                Err(EmulatorError::Ip { message, .. }) if message.contains("exists") => continue,
                Err(e) => return Err(e),
            }
        }
        let (slot, namespace) = claimed.ok_or(EmulatorError::NoSlot)?;
        let base = u32::from(Ipv4Addr::new(100, 64, 0, 0)) + slot * 4;
        let mut path = EmulatedPath {
            slot,
            namespace,
            host: Ipv4Addr::from(base + 1),
            client: Ipv4Addr::from(base + 2),
            shape: down,
            mover: None,
            tuns: Vec::new(),
        };
        path.configure(up, down)?;
        Ok(path)
    }

    fn configure(&mut self, up: Shape, down: Shape) -> Result<(), EmulatorError> {
        let ns = self.namespace.clone();
        let host_dev = format!("wfl{}h", self.slot);
        let client_dev = format!("wfl{}c", self.slot);
        for name in [&host_dev, &client_dev] {
            let fd = tun::open(name).map_err(|source| EmulatorError::Tun {
                name: name.clone(),
                source,
            })?;
            self.tuns.push(fd);
        }
        let host_cidr = format!("{}/30", self.host);
        let client_cidr = format!("{}/30", self.client);
        let mtu = MTU.to_string();
        ip(&["link", "set", &client_dev, "netns", &ns])?;
        // No IPv6 link-local addresses: the path carries IPv4 only.
        let _ = ip(&["link", "set", "dev", &host_dev, "addrgenmode", "none"]);
        let _ = ip(&[
            "-n",
            &ns,
            "link",
            "set",
            "dev",
            &client_dev,
            "addrgenmode",
            "none",
        ]);
        ip(&["link", "set", "dev", &host_dev, "mtu", &mtu])?;
        ip(&["-n", &ns, "link", "set", "dev", &client_dev, "mtu", &mtu])?;
        ip(&["addr", "add", &host_cidr, "dev", &host_dev])?;
        ip(&["-n", &ns, "addr", "add", &client_cidr, "dev", &client_dev])?;
        ip(&["-n", &ns, "link", "set", "dev", "lo", "up"])?;
        ip(&["-n", &ns, "link", "set", "dev", &client_dev, "up"])?;
        ip(&["link", "set", "dev", &host_dev, "up"])?;
        // The host's TCP may remember ssthresh for this address from an earlier path.
        let _ = ip(&["tcp_metrics", "delete", &self.client.to_string()]);
        let mover =
            mover::Mover::start(self.tuns[1].as_raw_fd(), self.tuns[0].as_raw_fd(), up, down)
                .map_err(EmulatorError::Mover)?;
        self.mover = Some(mover);
        Ok(())
    }

    /// The host side's address (what `$WIREFOLD_LINK_HOST` holds).
    pub fn host_addr(&self) -> Ipv4Addr {
        self.host
    }

    /// The namespace side's address.
    pub fn client_addr(&self) -> Ipv4Addr {
        self.client
    }

    /// The network namespace's name (for `ip netns exec`).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The host → namespace direction's shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Whether the mover thread runs with real-time priority.
    pub fn realtime(&self) -> bool {
        self.mover
            .as_ref()
            .is_some_and(|m| m.realtime.load(Ordering::Relaxed))
    }

    /// Counters of the namespace → host direction.
    pub fn up_counts(&self) -> DirectionCounts {
        self.mover
            .as_ref()
            .map(|m| m.up.snapshot())
            .unwrap_or_default()
    }

    /// Counters of the host → namespace direction.
    pub fn down_counts(&self) -> DirectionCounts {
        self.mover
            .as_ref()
            .map(|m| m.down.snapshot())
            .unwrap_or_default()
    }

    /// A command that runs `program args…` inside the namespace, with
    /// `$WIREFOLD_LINK_HOST` and `$WIREFOLD_LINK_CLIENT` set, and the host side's
    /// address added to `no_proxy` (no proxy is reachable from inside).
    pub fn command<S: AsRef<OsStr>>(&self, program: S, args: &[S]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.namespace])
            .arg(program)
            .args(args);
        cmd.env(HOST_ENV, self.host.to_string())
            .env(CLIENT_ENV, self.client.to_string());
        for var in ["no_proxy", "NO_PROXY"] {
            let mut value = std::env::var(var).unwrap_or_default();
            if !value.is_empty() {
                value.push(',');
            }
            value.push_str(&self.host.to_string());
            cmd.env(var, value);
        }
        cmd
    }
}

impl Drop for EmulatedPath {
    fn drop(&mut self) {
        self.mover = None;
        self.tuns.clear();
        // Whatever the command left running in the namespace ends with it.
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.namespace])
            .stderr(Stdio::null())
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: signalling a process of our own namespace by pid.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if let Err(e) = ip(&["netns", "del", &self.namespace]) {
            eprintln!("wirefold lab link: cleanup: {e}");
        }
        let _ = ip(&["tcp_metrics", "delete", &self.client.to_string()]);
    }
}

/// The child's pid while it runs, for forwarding SIGTERM and SIGHUP.
static CHILD: AtomicI32 = AtomicI32::new(0);
/// The last terminating signal received (0: none).
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::SeqCst);
    let child = CHILD.load(Ordering::SeqCst);
    // SIGINT and SIGQUIT from a terminal reach the whole foreground group, the child
    // included; the others are passed on.
    if child > 0 && sig != libc::SIGINT && sig != libc::SIGQUIT {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, sig) };
    }
}

/// Installs [`on_signal`] for SIGINT, SIGQUIT, SIGTERM and SIGHUP, and restores the
/// previous handlers when dropped: the process outlives its command so that the path
/// is always cleaned up, like a shell waiting for its foreground job.
struct SignalGuard {
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

impl SignalGuard {
    fn install() -> SignalGuard {
        let mut previous = Vec::new();
        for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: a zeroed sigaction is valid; the handler only touches atomics and kill.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &action, &mut old) == 0 {
                    previous.push((sig, old));
                }
            }
        }
        SignalGuard { previous }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for (sig, old) in &self.previous {
            // SAFETY: restoring a sigaction we saved.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}

/// Sets up the emulated path, runs the command behind it and tears the path down;
/// returns the command's exit code (128 + signal number when a signal ended it).
pub fn run_command(args: &EmulatorArgs) -> Result<i32, EmulatorError> {
    let _signals = SignalGuard::install();
    SIGNALLED.store(0, Ordering::SeqCst);
    let path = EmulatedPath::start(args.shape())?;
    if SIGNALLED.load(Ordering::SeqCst) != 0 {
        return Err(EmulatorError::Interrupted);
    }
    let program = &args.command[0];
    let mut child = path
        .command(
            program.as_str(),
            &args.command[1..]
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        )
        .spawn()
        .map_err(|source| EmulatorError::Spawn {
            command: program.clone(),
            source,
        })?;
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let status = child.wait();
    CHILD.store(0, Ordering::SeqCst);
    drop(path);
    let status = status.map_err(|source| EmulatorError::Spawn {
        command: program.clone(),
        source,
    })?;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// `wirefold lab link`: runs the command behind the emulated path, and exits with its
/// exit code when that is not 0 (after the path is torn down).
pub fn run(args: &EmulatorArgs) -> Result<(), EmulatorError> {
    let code = run_command(args)?;
    if code != 0 {
        let _ = io::stdout().flush();
        std::process::exit(code);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1.6mbit"), Ok(1_600_000));
        assert_eq!(parse_rate("28.8kbit"), Ok(28_800));
        assert_eq!(parse_rate("100Mbit"), Ok(100_000_000));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("1500bit"), Ok(1500));
        let e = parse_rate("1.6mbps").unwrap_err();
        assert!(
            e.starts_with("`--rate 1.6mbps`: use kbit, mbit or gbit"),
            "{e}"
        );
        assert!(parse_rate("100").unwrap_err().contains("give a unit"));
        assert!(parse_rate("0kbit").is_err());
        assert!(parse_rate("500bit").is_err());
        assert!(parse_rate("20gbit").is_err());
        assert!(parse_rate("fastmbit").is_err());
        assert!(parse_rate("1.2.3mbit").is_err());
    }

    #[test]
    fn delays() {
        assert_eq!(parse_delay("75ms"), Ok(Duration::from_millis(75)));
        assert_eq!(parse_delay("0.16s"), Ok(Duration::from_millis(160)));
        assert_eq!(parse_delay("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_delay("0ms"), Ok(Duration::ZERO));
        assert!(parse_delay("75").unwrap_err().contains("give a unit"));
        assert!(parse_delay("75min").is_err());
        assert!(parse_delay("11s").is_err());
    }

    #[test]
    fn queues() {
        assert_eq!(parse_queue("100"), Ok(100));
        assert!(parse_queue("0").is_err());
        assert!(parse_queue("lots").is_err());
    }

    #[test]
    fn command_line() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: EmulatorArgs,
        }
        let cli = Cli::try_parse_from([
            "x",
            "--rate",
            "1.6mbit",
            "--delay",
            "75ms",
            "--",
            "curl",
            "-s",
            "http://h/",
        ])
        .unwrap();
        assert_eq!(
            cli.args.shape(),
            Shape {
                rate_bps: 1_600_000,
                delay: Duration::from_millis(75),
                queue: DEFAULT_QUEUE
            }
        );
        assert_eq!(cli.args.command, ["curl", "-s", "http://h/"]);
        assert!(Cli::try_parse_from(["x", "--rate", "1.6mbit", "--delay", "75ms"]).is_err());
        let err = Cli::try_parse_from(["x", "--rate", "1.6mbps", "--delay", "75ms", "--", "true"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("use kbit, mbit or gbit"), "{err}");
    }
}
