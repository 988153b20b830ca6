//! Stage 4, adapt: picks the fidelity variant for this client and load.
//!
//! Adaptive fidelity (Client Hints, bandwidth estimates, the load controller) is a
//! later capability; until it lands every instance passes through unchanged.

use crate::model::{Instance, RequestContext};

/// Runs on every instance, after `remember` (what is stored is always the full
/// instance): may replace the instance with a smaller variant of it, never with other
/// content. Returns the instance to encode.
pub fn adapt(_ctx: &RequestContext, instance: Instance) -> Instance {
    instance
}
