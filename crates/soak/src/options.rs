//! What a soak run is asked to do: its targets, length and mix. Apart from `drive`,
//! which runs it, so the report can name them without importing the driver.

use std::net::SocketAddr;
use std::time::Duration;

use crate::sample::Watched;

/// The proxy pair as the driver reaches it.
#[derive(Clone, Copy, Debug)]
pub struct PairTarget {
    /// `wirefold client`'s listener (a forward proxy).
    pub proxy: SocketAddr,
    /// The soak origin, as the absolute-form requests name it.
    pub origin: SocketAddr,
}

/// A soak run.
#[derive(Clone, Debug)]
pub struct DriveOptions {
    /// `wirefold serve --origin <the soak origin>`.
    pub direct: Option<SocketAddr>,
    pub pair: Option<PairTarget>,
    pub duration: Duration,
    /// Workers, each with one connection at a time.
    pub connections: usize,
    /// The share of workers on the pair when both targets are given.
    pub pair_share: f64,
    /// The share of requests that are hostile.
    pub hostile_share: f64,
    pub watch: Vec<Watched>,
    pub sample_every: Duration,
    /// The longest wait for a whole answer.
    pub request_timeout: Duration,
    /// The longest a slowloris head may stay open before that is an error.
    pub slowloris_limit: Duration,
    pub seed: u64,
}

impl Default for DriveOptions {
    fn default() -> Self {
        DriveOptions {
            direct: None,
            pair: None,
            duration: Duration::from_secs(30 * 60),
            connections: 64,
            pair_share: 0.375,
            hostile_share: 0.05,
            watch: Vec::new(),
            sample_every: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            slowloris_limit: Duration::from_secs(75),
            seed: 1,
        }
    }
}
