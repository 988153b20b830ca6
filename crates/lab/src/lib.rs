//! The lab (being written).
