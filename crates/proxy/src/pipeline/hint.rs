//! Stage 5, hint: tells the client what it will need next (preload, 103, push).
//!
//! Inline download is a later capability; until it lands every instance passes
//! through unchanged.

use crate::model::{Instance, RequestContext};

/// Runs on every instance, after `adapt`: may add hint fields (`Link: rel=preload`)
/// to the instance's head, never change its body. Returns the instance to encode.
pub fn hint(_ctx: &RequestContext, instance: Instance) -> Instance {
    instance
}
