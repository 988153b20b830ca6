//! HTTP semantics as types: each header wirefold acts on is parsed once, at
//! the edge, from an `http::HeaderMap` into a typed value, and the protocol
//! rules are functions of those values. Pure: no I/O, no async, no clocks
//! (callers pass the time).
//!
//! - [`ContentCoding`]: the content codings wirefold produces (the codecs are in `codec`).
//! - [`accept_encoding`]: `Accept-Encoding` and content-coding negotiation.
//! - [`cache_control`]: `Cache-Control` directives.
//! - [`caching`]: RFC 9111 rules for a shared cache: storability,
//!   freshness and age, reuse of stored responses, stale-if-error.
//! - [`vary`]: `Vary` and the secondary cache key.
//! - [`audience`]: who besides the requester may receive a response or what is
//!   derived from it (credentials, `Set-Cookie`, `private`).
//! - [`host`]: the host a request is for (`Host`, absolute form, `:authority`).
//! - [`conditional`]: entity tags and precondition evaluation
//!   (`If-Match`, `If-None-Match`, `If-Modified-Since`, …).
//! - [`range`]: single byte ranges and `If-Range`.
//! - [`hop_by_hop`]: connection-specific fields a proxy must drop.
//! - [`client_hints`]: network and device Client Hints (`Save-Data`, `ECT`,
//!   `RTT`, `Downlink`, `Sec-CH-DPR`, …) for choosing lighter variants.
//! - [`fidelity`]: image formats and text kinds with variants, `Accept` for
//!   images, RFC 2295 `Alternates`, `TCN`, `Negotiate`.
//! - [`delta`], [`dictionary`], [`digest`]: RFC 3229 and RFC 9842 fields, and the
//!   digest that lets a client verify a reconstructed instance.
//! - [`priority`]: RFC 9218 `Priority` and the urgency a request gets by its
//!   destination, for ordering responses on one connection.
//!
//! Every parser accepts any header bytes (including non-UTF-8) and never
//! panics; where input is ambiguous it takes the reading that cannot serve
//! the wrong content.

pub mod accept_encoding;
pub mod audience;
pub mod cache_control;
pub mod caching;
pub mod client_hints;
mod coding;
pub mod conditional;
pub mod delta;
pub mod dictionary;
pub mod digest;
pub mod fidelity;
mod fields;
pub mod hop_by_hop;
pub mod host;
pub mod priority;
pub mod range;
pub mod url_pattern;
pub mod vary;

pub use accept_encoding::AcceptEncoding;
pub use cache_control::CacheControl;
pub use caching::{
    check_storable, is_heuristically_cacheable, is_storable, may_serve_stale_on_error, reuse,
    update_headers_from_304, Freshness, NotStorable, Reuse,
};
pub use client_hints::ClientHints;
pub use coding::ContentCoding;
pub use conditional::{evaluate, last_modified, EntityTag, IfNoneMatch, Precondition};
pub use fields::format_http_date;
pub use fields::{decimal_value, media_type_essence};
pub use hop_by_hop::{is_upgrade_request, remove_hop_by_hop};
pub use range::{content_range, range_for, unsatisfied_range, RangeFields, RangeRequest};
pub use vary::Vary;
