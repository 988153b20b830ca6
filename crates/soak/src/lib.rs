//! The soak benchmark (`bench/soak.sh`, docs/benchmarks.md): wirefold at saturation
//! for a long time, with every body checked.
//!
//! - [`catalogue`]: the origin's resources and the instance names (`soak.R.V`);
//! - [`truth`]: every instance's body, a pure function of (resource, version);
//! - [`origin`]: the origin serving them;
//! - [`verify`]: one answer judged against the truth (pure);
//! - [`hostile`]: hostile field values, malformed requests over raw TCP, slowloris;
//! - [`drive`]: the workers and the sampler;
//! - [`stats`], [`sample`], [`report`]: counting, /proc readings, the report.

pub mod catalogue;
pub mod drive;
pub mod hostile;
pub mod options;
pub mod origin;
pub mod report;
pub mod sample;
pub mod stats;
pub mod truth;
pub mod verify;
