//! Listeners and the request pipeline (being written).
