//! Checks of the path emulator (`wirefold lab link`) against physics, with the
//! tolerances of issue 5: ping RTT = 2·delay within a millisecond; a bulk TCP transfer
//! reaches the rate within 5%; a short transfer takes the slow-start rounds within
//! ±1 RTT.
//!
//! They need root, iproute2 (`ip netns`), ping and curl. Where they cannot run they say
//! why and fail, unless WIREFOLD_SKIP_NETNS=1 is set (then they pass, saying so).
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use wirefold_testbed::emulator::{self, EmulatedPath, EmulatorArgs, Shape};

/// The checks time the emulator: one at a time, on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts an emulated path, or explains why it cannot: `None` means "skipped" (only with
/// WIREFOLD_SKIP_NETNS=1); otherwise the test fails with the reason.
fn start(shape: Shape) -> Option<EmulatedPath> {
    let tools = ["ip", "ping", "curl"]
        .into_iter()
        .filter(|t| !on_path(t))
        .collect::<Vec<_>>();
    let result = if !tools.is_empty() {
        Err(format!(
            "missing tools: {} (scripts/test.sh installs them)",
            tools.join(", ")
        ))
    } else {
        EmulatedPath::start(shape).map_err(|e| e.to_string())
    };
    match result {
        Ok(path) => Some(path),
        Err(why) if std::env::var_os("WIREFOLD_SKIP_NETNS").is_some_and(|v| v == "1") => {
            eprintln!("SKIPPED (WIREFOLD_SKIP_NETNS=1): the path emulator cannot run here: {why}");
            None
        }
        Err(why) => panic!("the path emulator cannot run here: {why}\n(needs root and iproute2; set WIREFOLD_SKIP_NETNS=1 to skip)"),
    }
}

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run_inside(path: &EmulatedPath, program: &str, args: &[&str]) -> Output {
    let out = path
        .command(program, args)
        .output()
        .expect("run a command in the namespace");
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A one-shot HTTP server on the host side: answers each connection's request with
/// `size` bytes, the sender using classic congestion control (cubic: slow start with
/// the kernel's initial window of 10) rather than the machine's default.
fn serve(addr: Ipv4Addr, size: usize, connections: usize) -> (u16, thread::JoinHandle<()>) {
    let listener = TcpListener::bind((addr, 0)).expect("bind on the host side of the path");
    set_congestion_control(&listener, "cubic");
    let port = listener.local_addr().unwrap().port();
    let handle = thread::spawn(move || {
        for _ in 0..connections {
            let (mut conn, _) = listener.accept().expect("accept");
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).expect("read the request");
                assert!(n > 0, "request cut short");
                request.extend_from_slice(&buf[..n]);
            }
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n");
            conn.write_all(head.as_bytes()).unwrap();
            let body = vec![b'x'; 64 * 1024];
            let mut left = size;
            while left > 0 {
                let n = left.min(body.len());
                conn.write_all(&body[..n]).unwrap();
                left -= n;
            }
        }
    });
    (port, handle)
}

#[allow(unsafe_code)] // std has no setsockopt
fn set_congestion_control(listener: &TcpListener, name: &str) {
    // SAFETY: setsockopt with a byte string and its length.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    assert_eq!(
        rc,
        0,
        "TCP_CONGESTION {name}: {}",
        std::io::Error::last_os_error()
    );
}

/// curl's timings: (size_download, time_starttransfer, time_total) in bytes and seconds.
fn curl(path: &EmulatedPath, url: &str) -> (f64, f64, f64) {
    let out = run_inside(
        path,
        "curl",
        &[
            "-sS",
            "--noproxy",
            "*",
            "-o",
            "/dev/null",
            "-w",
            "%{size_download} %{time_starttransfer} %{time_total}",
            url,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<f64> = text
        .split_whitespace()
        .map(|x| x.parse().expect("curl -w number"))
        .collect();
    (v[0], v[1], v[2])
}

#[test]
fn ping_rtt_is_twice_the_delay() {
    let _one = serial();
    let delay = Duration::from_millis(20);
    let Some(path) = start(Shape {
        rate_bps: 100_000_000,
        delay,
        queue: emulator::DEFAULT_QUEUE,
    }) else {
        return;
    };
    let host = path.host_addr().to_string();
    let out = run_inside(&path, "ping", &["-n", "-c", "5", "-i", "0.2", &host]);
    let text = String::from_utf8_lossy(&out.stdout);
    let rtts: Vec<f64> = text
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(rtts.len(), 5, "five replies expected:\n{text}");
    let m = median(rtts.clone());
    eprintln!(
        "ping over 100mbit, 20 ms one way: RTTs {rtts:?} ms, median {m:.3} ms (expected 40, allowed [40, 41]); mover real-time: {}, latest delivery {:?} behind schedule",
        path.realtime(),
        path.down_counts().max_late.max(path.up_counts().max_late)
    );
    assert!(
        (40.0..=41.0).contains(&m),
        "median RTT {m} ms is not 2·20 ms within 1 ms: {rtts:?}"
    );
}

#[test]
fn bulk_transfer_reaches_the_rate() {
    let _one = serial();
    let rate = 8_000_000u64;
    let Some(path) = start(Shape {
        rate_bps: rate,
        delay: Duration::from_millis(10),
        queue: emulator::DEFAULT_QUEUE,
    }) else {
        return;
    };
    let size = 3_000_000;
    let (port, server) = serve(path.host_addr(), size, 1);
    let before = path.down_counts();
    let (bytes, first_byte, total) = curl(&path, &format!("http://{}:{port}/", path.host_addr()));
    server.join().unwrap();
    let after = path.down_counts();
    assert_eq!(bytes as usize, size);
    // Compare like with like: the path carries IP packets (headers included) at the
    // rate; the application sees only TCP payload. The expected goodput is the rate
    // times the payload share of what crossed the path, counted by the mover (IP, TCP
    // headers with timestamps, and the retransmissions of drop-tail losses).
    let path_bytes = (after.bytes - before.bytes) as f64;
    let payload_share = bytes / path_bytes;
    let expected = rate as f64 * payload_share;
    let elapsed = total - first_byte;
    let goodput = bytes * 8.0 / elapsed;
    let path_rate = path_bytes * 8.0 / elapsed;
    let error = (goodput - expected) / expected;
    eprintln!(
        "bulk {size} B over 8mbit, 10 ms one way: {elapsed:.3} s from first to last byte; goodput {:.3} Mbit/s, expected {:.3} Mbit/s (8 Mbit/s × payload share {payload_share:.4}): {:+.2}%; IP bytes on the path {path_bytes} → {:.3} Mbit/s; {} drop-tail drops",
        goodput / 1e6,
        expected / 1e6,
        error * 100.0,
        path_rate / 1e6,
        after.dropped - before.dropped
    );
    assert!(
        error.abs() <= 0.05,
        "goodput {goodput:.0} bit/s is not within 5% of {expected:.0} bit/s"
    );
}

#[test]
fn short_transfer_follows_slow_start() {
    let _one = serial();
    let rate = 10_000_000u64;
    let delay = Duration::from_millis(50);
    let rtt = 2.0 * delay.as_secs_f64();
    let Some(path) = start(Shape {
        rate_bps: rate,
        delay,
        queue: emulator::DEFAULT_QUEUE,
    }) else {
        return;
    };
    let size = 100_000usize;
    let (port, server) = serve(path.host_addr(), size, 1);
    let (bytes, _, total) = curl(&path, &format!("http://{}:{port}/", path.host_addr()));
    server.join().unwrap();
    assert_eq!(bytes as usize, size);
    // The slow-start round-trip model: one RTT for the handshake, then k rounds of
    // request-and-window, the window starting at IW = 10 segments and doubling each
    // round, plus the serialization of the bytes at the path's rate.
    let timestamps =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_timestamps").is_ok_and(|s| s.trim() != "0");
    let mss = if timestamps { 1448.0 } else { 1460.0 };
    let segments = (size as f64 / mss).ceil();
    let iw = 10.0;
    let rounds = (segments / iw + 1.0).log2().ceil();
    let serialization = size as f64 * 8.0 / rate as f64;
    let model = (1.0 + rounds) * rtt + serialization;
    // For reference, the lab's estimate formula with an initial window of one segment.
    let estimate_iw1 = (1.5 + (segments + 1.0).log2()) * rtt + serialization;
    let off = (total - model) / rtt;
    eprintln!(
        "short transfer {size} B over 10mbit, 50 ms one way: {total:.3} s; model (1 + {rounds} rounds)·RTT + {serialization:.3} s = {model:.3} s ({segments} segments of {mss}, IW 10): {off:+.2} RTT; the lab estimate formula (IW 1) gives {estimate_iw1:.3} s"
    );
    assert!(
        off.abs() <= 1.0,
        "{total:.3} s is more than 1 RTT from the slow-start model's {model:.3} s"
    );
}

#[test]
fn exit_code_environment_and_cleanup() {
    let _one = serial();
    // Checks that the emulator can run at all (or skips, as the others do).
    let Some(probe) = start(Shape {
        rate_bps: 1_000_000,
        delay: Duration::ZERO,
        queue: 10,
    }) else {
        return;
    };
    drop(probe);
    let marker =
        std::env::temp_dir().join(format!("wirefold-emulator-test-{}", std::process::id()));
    let script = format!(
        "test -n \"$WIREFOLD_LINK_HOST\" && ip netns identify $$ > {} && exit 7",
        marker.display()
    );
    let args = EmulatorArgs {
        rate: 1_000_000,
        delay: Duration::from_millis(1),
        queue: 10,
        command: vec!["sh".into(), "-c".into(), script],
    };
    assert_eq!(
        emulator::run_command(&args).unwrap(),
        7,
        "the command's exit code"
    );
    let name = std::fs::read_to_string(&marker).expect("the command ran in a named namespace");
    let _ = std::fs::remove_file(&marker);
    let name = name.trim();
    assert!(name.starts_with("wflink"), "{name}");
    assert!(
        !netns_list()
            .lines()
            .any(|l| l.split_whitespace().next() == Some(name)),
        "{name} is deleted on exit"
    );
    // The only route inside is the path's /30.
    let path = EmulatedPath::start(args.shape()).unwrap();
    let out = run_inside(&path, "ip", &["-4", "-o", "route"]);
    let routes = String::from_utf8_lossy(&out.stdout);
    assert_eq!(routes.lines().count(), 1, "{routes}");
    assert!(
        routes.starts_with(&format!(
            "{}/30 dev wfl",
            Ipv4Addr::from(u32::from(path.host_addr()) - 1)
        )),
        "{routes}"
    );
    let name = path.namespace().to_string();
    drop(path);
    assert!(
        !netns_list()
            .lines()
            .any(|l| l.split_whitespace().next() == Some(name.as_str())),
        "{name} still exists"
    );
}

fn netns_list() -> String {
    String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned()
}
