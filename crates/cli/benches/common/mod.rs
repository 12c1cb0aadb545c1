//! What the benchmarks share.

use std::path::PathBuf;
use std::process::Command;

/// The Rust book that ships with every rustup toolchain (the `rust-docs` component).
pub fn book() -> PathBuf {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("share/doc/rust/html/book")
}
