//! Adaptive fidelity (Seshan, Stemm & Katz, "Benefits of transparent content
//! negotiation in HTTP", 1998): smaller representations of a resource, and the
//! choice among them by the client's link and the server's egress.
//!
//! - [`image`]: image ladders (decode under limits checked from the header first,
//!   resize, encode WebP and the original's format), each rung ~70% of the bytes of
//!   the one above.
//! - [`choice`]: the transfer-time estimate, the rule that picks a variant, the
//!   smoothing of passive measurements, and the egress controller.
//! - [`config`]: the `[fidelity]` section.
//!
//! Pure: no I/O, no clocks; the proxy runs the CPU-heavy parts off its reactor,
//! under a CPU budget, and keeps what they make in its store.

pub mod choice;
pub mod config;
pub mod image;
pub mod text;

pub use config::FidelityConfig;
