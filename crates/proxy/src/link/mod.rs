//! The proxy pair's link: one HTTP/2 connection over TLS between a client proxy near
//! the users and a server proxy near the origins, carrying many requests at once.
//! Responses are frame sequences ([`frame`]) so a stale instance can flow while the
//! origin is consulted. `docs/link-protocol.md` is the specification.

pub mod client;
pub mod frame;
