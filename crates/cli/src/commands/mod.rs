//! One module per command.

pub mod backup;
pub mod eval;
pub mod export;
pub mod fetch;
pub mod index;
pub mod keys;
pub mod mcp;
pub mod pdf_worker;
pub mod research;
pub mod routes;
pub mod serve;
pub mod sessions;
pub mod worker;
