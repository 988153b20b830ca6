//! Stage 4, adapt: picks the fidelity variant for this client and load.
//!
//! Adaptive fidelity (Client Hints, bandwidth estimates, the load controller) is a
//! later capability; until it lands every instance passes through unchanged.

use crate::model::{Instance, RequestContext};

pub fn adapt(_ctx: &RequestContext, instance: Instance) -> Instance {
    instance
}
