//! The test bench: tools that stand in for the network and for origins when wirefold is
//! tested or measured. Of wirefold's own crates they use only the codecs, the HTTP
//! vocabulary and the corpus reader; the CLI runs them as `wirefold lab link`,
//! `wirefold lab series-origin` and (with the accelerator in front) `wirefold demo`.
//!
//! - [`emulator`]: a network path with packet-level delay, rate and a drop-tail queue,
//!   behind which a command runs in its own network namespace (docs/link-emulator.md).
//! - [`series_origin`]: an origin whose pages change on every request, for the
//!   optimistic-delta benchmark (docs/optimistic-bench.md).
//! - [`sample_site`]: the demo's changing sample site.
//! - [`redis`]: real Redis servers and clusters on free loopback ports, for the tests
//!   and the benchmark of a fleet's shared store.
//! - [`serve`]: serving HTTP/1.1 connections with an answer function (also the soak
//!   benchmark's origin, `wirefold-soak`).

// The emulator drives the kernel directly (TUN ioctls, eventfd, raw reads and writes,
// signals): unsafe by nature, each site with its SAFETY note.
#[allow(unsafe_code)]
pub mod emulator;
pub mod redis;
pub mod sample_site;
pub mod series_origin;
pub mod serve;
