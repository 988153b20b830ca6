//! The content-addressed store (being written).
