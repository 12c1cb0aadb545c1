//! The fault and load suite (`scripts/chaos`): real `fathom` processes on loopback, faults
//! injected (the database going away, SIGKILLs under load, races between clients, hostile
//! input and sources), the invariants checked after each scenario, and one row of the figures
//! table per measurement (`common/figures.rs`). Sizes are short by default (CI) and long
//! with `FATHOM_CHAOS=long`.

#[path = "common/figures.rs"]
mod figures;
#[path = "common/served.rs"]
mod served;

#[path = "chaos/support.rs"]
mod support;

#[path = "chaos/hostile_http.rs"]
mod hostile_http;
#[path = "chaos/hostile_sources.rs"]
mod hostile_sources;
#[path = "chaos/kill.rs"]
mod kill;
#[path = "chaos/load.rs"]
mod load;
#[path = "chaos/outage.rs"]
mod outage;
#[path = "chaos/races.rs"]
mod races;
