//! The packet mover: one thread that reads IP packets from both TUN devices and writes
//! each one to the other device when the emulated path would deliver it.
//!
//! Each direction is a serializer (the bottleneck) with a bounded drop-tail buffer in
//! front of it and a propagation delay behind it (Mahimahi's link shell followed by its
//! delay shell):
//!
//! ```text
//! start   = max(arrival, serializer free)    (waits in the buffer while the serializer is busy)
//! depart  = start + len·8 / rate             (serialization; busy until then)
//! release = depart + delay                   (propagation)
//! ```
//!
//! A packet that arrives while `queue` packets are still waiting or being serialized
//! is dropped. Departures, and so releases, are monotonic, so each direction is a FIFO.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long before a release the mover stops sleeping and polls busily: timer wake-ups
/// of an ordinary thread on a loaded machine are late by tens of microseconds, sometimes
/// more.
const SPIN: Duration = Duration::from_micros(200);
/// The same with real-time scheduling, whose wake-ups are prompt.
const SPIN_REALTIME: Duration = Duration::from_micros(50);

/// Largest packet read from a TUN device (its MTU is 1500; this is the IP maximum).
const MAX_PACKET: usize = 65536;

/// Counters for one direction, readable while the emulated path runs.
#[derive(Debug, Default)]
pub struct DirectionStats {
    /// Packets delivered to the far side.
    pub packets: AtomicU64,
    /// IP bytes (headers included) delivered to the far side.
    pub bytes: AtomicU64,
    /// Packets dropped because the buffer was full (drop-tail).
    pub dropped: AtomicU64,
    /// Packets dropped because they were not IPv4 (IPv6 neighbour discovery and such).
    pub not_ipv4: AtomicU64,
    /// Largest lateness of a delivery behind its release time, in nanoseconds.
    pub max_late_ns: AtomicU64,
}

/// A snapshot of `DirectionStats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionCounts {
    pub packets: u64,
    pub bytes: u64,
    pub dropped: u64,
    pub not_ipv4: u64,
    pub max_late: Duration,
}

impl DirectionStats {
    pub fn snapshot(&self) -> DirectionCounts {
        DirectionCounts {
            packets: self.packets.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            not_ipv4: self.not_ipv4.load(Ordering::Relaxed),
            max_late: Duration::from_nanos(self.max_late_ns.load(Ordering::Relaxed)),
        }
    }
}

/// The shape of one direction of the emulated path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Bits per second.
    pub rate_bps: u64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Drop-tail buffer, in packets.
    pub queue: usize,
}

impl Shape {
    /// Serialization time of `len` bytes.
    pub fn tx_time(&self, len: usize) -> Duration {
        let nanos = (len as u128 * 8 * 1_000_000_000) / self.rate_bps as u128;
        Duration::from_nanos(nanos as u64)
    }
}

/// One direction's state.
struct Direction {
    shape: Shape,
    src: RawFd,
    dst: RawFd,
    /// When the serializer becomes free.
    serializer_free: Option<Instant>,
    /// Departure times of packets still in the buffer or on the serializer.
    in_buffer: VecDeque<Instant>,
    /// Packets on their way: (release time, packet).
    delay_line: VecDeque<(Instant, Vec<u8>)>,
    stats: Arc<DirectionStats>,
}

impl Direction {
    fn arrive(&mut self, packet: &[u8], now: Instant) {
        if packet.first().map(|b| b >> 4) != Some(4) {
            self.stats.not_ipv4.fetch_add(1, Ordering::Relaxed);
            return;
        }
        while self.in_buffer.front().is_some_and(|&depart| depart <= now) {
            self.in_buffer.pop_front();
        }
        if self.in_buffer.len() >= self.shape.queue {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let start = match self.serializer_free {
            Some(free) if free > now => free,
            _ => now,
        };
        let depart = start + self.shape.tx_time(packet.len());
        self.serializer_free = Some(depart);
        self.in_buffer.push_back(depart);
        self.delay_line
            .push_back((depart + self.shape.delay, packet.to_vec()));
    }

    /// Delivers every packet due by `now`.
    fn deliver(&mut self, now: Instant) {
        while let Some((release, packet)) = self.delay_line.pop_front() {
            if release > now {
                self.delay_line.push_front((release, packet));
                break;
            }
            // SAFETY: writing an owned buffer to a descriptor we hold.
            let n = unsafe { libc::write(self.dst, packet.as_ptr().cast(), packet.len()) };
            if n >= 0 {
                self.stats.packets.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .bytes
                    .fetch_add(packet.len() as u64, Ordering::Relaxed);
                let late = Instant::now().saturating_duration_since(release).as_nanos() as u64;
                self.stats.max_late_ns.fetch_max(late, Ordering::Relaxed);
            }
        }
    }

    /// Reads every packet waiting on the source device.
    fn read_all(&mut self, buf: &mut [u8]) -> io::Result<()> {
        loop {
            // SAFETY: reading into a buffer we own, at most its length.
            let n = unsafe { libc::read(self.src, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let err = io::Error::last_os_error();
                return match err.raw_os_error() {
                    Some(libc::EAGAIN) => Ok(()),
                    Some(libc::EINTR) => continue,
                    _ => Err(err),
                };
            }
            let now = Instant::now();
            self.arrive(&buf[..n as usize], now);
        }
    }
}

/// The running mover thread; dropping it stops the thread.
pub struct Mover {
    stop: Arc<AtomicBool>,
    wake: OwnedFd,
    thread: Option<JoinHandle<()>>,
    /// Client → host (upload) and host → client (download) counters.
    pub up: Arc<DirectionStats>,
    pub down: Arc<DirectionStats>,
    /// Whether the thread got real-time scheduling (SCHED_FIFO).
    pub realtime: Arc<AtomicBool>,
}

impl Mover {
    /// Starts moving packets: `client` is the namespace side's TUN, `host` the host side's.
    /// Both descriptors must stay open until the mover is dropped.
    pub fn start(client: RawFd, host: RawFd, up: Shape, down: Shape) -> io::Result<Mover> {
        // SAFETY: plain eventfd creation.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just created and own.
        let wake = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        let stop = Arc::new(AtomicBool::new(false));
        let up_stats = Arc::new(DirectionStats::default());
        let down_stats = Arc::new(DirectionStats::default());
        let realtime = Arc::new(AtomicBool::new(false));
        let dirs = [
            Direction {
                shape: up,
                src: client,
                dst: host,
                serializer_free: None,
                in_buffer: VecDeque::new(),
                delay_line: VecDeque::new(),
                stats: up_stats.clone(),
            },
            Direction {
                shape: down,
                src: host,
                dst: client,
                serializer_free: None,
                in_buffer: VecDeque::new(),
                delay_line: VecDeque::new(),
                stats: down_stats.clone(),
            },
        ];
        let wake_fd = wake.as_raw_fd();
        let (stop2, rt2) = (stop.clone(), realtime.clone());
        let thread = std::thread::Builder::new()
            .name("wirefold-mover".into())
            .spawn(move || {
                let spin = if tune_thread(&rt2) {
                    SPIN_REALTIME
                } else {
                    SPIN
                };
                if let Err(e) = run(dirs, wake_fd, &stop2, spin) {
                    eprintln!("wirefold lab link: packet mover stopped: {e}");
                }
            })?;
        Ok(Mover {
            stop,
            wake,
            thread: Some(thread),
            up: up_stats,
            down: down_stats,
            realtime,
        })
    }
}

impl Drop for Mover {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: an eventfd takes an 8-byte counter increment.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Precise wake-ups: 1 ns timer slack, and real-time priority when allowed (root), so
/// that a loaded machine delays the mover as little as possible. It sleeps between
/// packets and spins at most [`SPIN_REALTIME`] before each release, so it cannot hog a
/// core for long; the kernel's real-time throttling bounds it anyway. Returns whether
/// the thread runs real-time. `WIREFOLD_LINK_NO_RT=1` keeps ordinary scheduling.
fn tune_thread(realtime: &AtomicBool) -> bool {
    // SAFETY: prctl and sched_setscheduler on the calling thread with plain arguments.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
        if std::env::var_os("WIREFOLD_LINK_NO_RT").is_none() {
            let param = libc::sched_param { sched_priority: 1 };
            if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 {
                realtime.store(true, Ordering::Relaxed);
                return true;
            }
        }
    }
    false
}

fn run(mut dirs: [Direction; 2], wake: RawFd, stop: &AtomicBool, spin: Duration) -> io::Result<()> {
    let mut buf = vec![0u8; MAX_PACKET];
    while !stop.load(Ordering::Relaxed) {
        for dir in dirs.iter_mut() {
            dir.read_all(&mut buf)?;
        }
        let now = Instant::now();
        for dir in dirs.iter_mut() {
            dir.deliver(now);
        }
        let next = dirs
            .iter()
            .filter_map(|d| d.delay_line.front().map(|(t, _)| *t))
            .min();
        let timeout = match next {
            Some(t) => {
                let left = t.saturating_duration_since(Instant::now());
                if left <= spin {
                    std::hint::spin_loop();
                    continue;
                }
                Some(left - spin)
            }
            None => None,
        };
        let mut fds = [
            libc::pollfd {
                fd: dirs[0].src,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: dirs[1].src,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as _,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: three valid pollfds and an optional timespec that outlive the call.
        let n = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                ts_ptr,
                std::ptr::null(),
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(err);
            }
        }
        for f in &fds[..2] {
            if f.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
                return Err(io::Error::other("a TUN device went away"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_time() {
        let s = Shape {
            rate_bps: 8_000_000,
            delay: Duration::ZERO,
            queue: 10,
        };
        assert_eq!(s.tx_time(1500), Duration::from_micros(1500));
        let modem = Shape {
            rate_bps: 28_800,
            delay: Duration::ZERO,
            queue: 10,
        };
        assert_eq!(modem.tx_time(36), Duration::from_millis(10));
    }

    #[test]
    fn queue_delay_and_drop_tail() {
        let stats = Arc::new(DirectionStats::default());
        let shape = Shape {
            rate_bps: 8_000_000,
            delay: Duration::from_millis(10),
            queue: 2,
        };
        let mut d = Direction {
            shape,
            src: -1,
            dst: -1,
            serializer_free: None,
            in_buffer: VecDeque::new(),
            delay_line: VecDeque::new(),
            stats: stats.clone(),
        };
        let t0 = Instant::now();
        let mut packet = vec![0u8; 1500];
        packet[0] = 0x45;
        d.arrive(&packet, t0);
        d.arrive(&packet, t0);
        d.arrive(&packet, t0); // the buffer holds two: dropped
        assert_eq!(stats.dropped.load(Ordering::Relaxed), 1);
        let releases: Vec<_> = d.delay_line.iter().map(|(t, _)| *t - t0).collect();
        assert_eq!(
            releases,
            [Duration::from_micros(11_500), Duration::from_micros(13_000)]
        );
        // Once the first has left the serializer there is room again, behind the second.
        d.arrive(&packet, t0 + Duration::from_micros(1500));
        assert_eq!(
            d.delay_line.back().unwrap().0 - t0,
            Duration::from_micros(14_500)
        );
        // Not IPv4: not forwarded.
        d.arrive(&[0x60, 0, 0, 0], t0);
        assert_eq!(stats.not_ipv4.load(Ordering::Relaxed), 1);
        assert_eq!(d.delay_line.len(), 3);
    }
}
