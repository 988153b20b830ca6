//! The client proxy (`wirefold client`): near the users, it answers browsers from the
//! instances it holds when they are fresh and otherwise asks the server proxy over
//! the link, verifying every instance before a browser sees it.

pub mod config;
pub mod instances;
pub mod reassemble;
