//! HTML pages: the inline references a page makes (being written).
