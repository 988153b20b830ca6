//! `wirefold-loadgen`: the load the nginx comparison needs beyond wrk and h2load
//! (`bench/compare-nginx.sh`, `bench/idle-conns.sh`, docs/benchmarks.md).
//!
//! - [`rate`]: open loop, as wrk2 does: requests on a fixed [`schedule`], each one's
//!   latency from its due time, so that a server falling behind shows in the tail;
//! - [`idle`]: many keep-alive connections, one exchange each, then held idle;
//! - [`surge`]: Surge-like on/off clients fetching pages and their objects, added in
//!   steps (the adaptive-fidelity benchmark, `bench/fidelity.sh`);
//! - [`latency`]: the histogram both report from; [`target`], [`client`]: the request
//!   and the HTTP/1.1 connection they share.

pub mod client;
pub mod idle;
pub mod latency;
pub mod rate;
pub mod schedule;
pub mod surge;
pub mod target;
