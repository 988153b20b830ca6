//! Stage 5, hint: tells the client what it will need next (preload, 103, push).
//!
//! Inline download is a later capability; until it lands every instance passes
//! through unchanged.

use crate::model::{Instance, RequestContext};

pub fn hint(_ctx: &RequestContext, instance: Instance) -> Instance {
    instance
}
