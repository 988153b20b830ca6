//! HTTP semantics as types (being written).
