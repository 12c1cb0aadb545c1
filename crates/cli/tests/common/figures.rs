//! The figures table of the fault and load suite (`scripts/chaos`): each scenario records what
//! it measured as one row, printed at once and, when `FATHOM_CHAOS_TABLE` names a file,
//! appended to it so that the script can print the whole table at the end.
#![allow(dead_code)] // not every test binary records every kind of row

use std::fmt::Display;
use std::io::Write;

/// How large a run of the suite is: `short` in CI and by default, `long` before a release
/// (`FATHOM_CHAOS=long`).
pub fn long() -> bool {
    std::env::var("FATHOM_CHAOS").is_ok_and(|v| v == "long")
}

/// `short` in the short suite, `long` in the long one.
pub fn scale<T>(short: T, long_value: T) -> T {
    if long() { long_value } else { short }
}

/// One row: the scenario, the figure, what was measured, and the bound it is held to.
/// `held` says whether the measurement is within the bound; the test asserts it too.
pub fn record(scenario: &str, figure: &str, measured: impl Display, bound: &str, held: bool) {
    let line = format!(
        "| {scenario} | {figure} | {measured} | {bound} | {} |",
        if held { "ok" } else { "FAILED" }
    );
    println!("{line}");
    if let Ok(path) = std::env::var("FATHOM_CHAOS_TABLE")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

/// The header the rows go under.
pub const HEADER: &str = "| scenario | figure | measured | bound | held |\n|---|---|---|---|---|";
