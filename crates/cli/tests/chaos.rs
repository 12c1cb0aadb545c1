//! The fault and load suite (`scripts/chaos`): real `fathom` processes on loopback, on SQLite
//! and Postgres, with faults injected; each scenario checks its invariants and records its
//! figures (common/figures.rs).

#[path = "common/figures.rs"]
mod figures;
#[path = "chaos/hostile_http.rs"]
mod hostile_http;
#[path = "common/served.rs"]
mod served;
