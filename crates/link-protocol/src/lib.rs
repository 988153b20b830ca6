//! The proxy pair's link protocol (`docs/link-protocol.md` is the specification): the
//! [`frame`]s a link response's body is made of, and the [`reassemble`]r that turns one
//! response's frames back into the verified current instance. Pure: no I/O, no async;
//! the server proxy (`wirefold-link-server`) writes frames, the client proxy
//! (`wirefold-client-proxy`) reads them.

pub mod frame;
pub mod reassemble;
