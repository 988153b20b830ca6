//! The accelerator: listeners, the request pipeline, the origin client, the file
//! source, the HTTP cache over the store, metrics and configuration.
//!
//! Start with [`server::start`]; read [`pipeline`] for what happens to a request.

pub mod access_log;
mod background;
pub mod body;
pub mod cache;
pub mod config;
mod config_error;
mod conn_slots;
pub mod decode;
pub mod destinations;
mod file_watch;
pub mod files;
mod first_bytes;
pub mod forward;
mod h2_budget;
pub mod h2_server;
pub mod live;
pub mod manifests;
pub mod metrics;
pub mod model;
pub mod origin;
pub mod page_stream;
pub mod page_weight;
mod park;
pub mod pipeline;
pub mod record;
pub mod recorder;
mod scan;
pub mod secret;
pub mod server;
mod shards;
pub mod status;
pub mod tls;
mod trim;
mod upgrade;
pub mod variants;
pub mod variants_build;

pub use config::Config;
/// Awaiting blocking work, for the crates above too (the link server, the client proxy).
pub use delta::blocking;
pub use server::{start, start_with, LinkEndpoint, Running, StartError};
