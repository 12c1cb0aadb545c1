//! Links `fathom` with packed relative relocations where the toolchain and C library can.
//!
//! A position-independent executable carries one relocation record (24 bytes) for each pointer
//! the loader must adjust at start: 1.8 MB of them for `fathom`, all read at every start and
//! kept resident. Packed (`DT_RELR`, glibc 2.36 and binutils 2.38 or later) they take 21 kB,
//! and an idle server's resident memory is 2 MiB smaller. Where the linker or the C library
//! cannot, the probe fails and the binary is linked as before.

use std::path::PathBuf;
use std::process::Command;

const PACKED: &str = "-Wl,-z,pack-relative-relocs";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.ends_with("-linux-gnu") && linker_packs_relocations() {
        println!("cargo:rustc-link-arg-bins={PACKED}");
    }
}

/// Links a trivial C program the way rustc links (through `cc`, as a PIE) with the flag, and
/// checks the linker neither refused nor ignored it (older ones only warn) and, when building
/// for this machine, that the program starts (the C library applies such relocations).
fn linker_packs_relocations() -> bool {
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return false;
    };
    let source = out.join("relr-probe.c");
    if std::fs::write(&source, "int main(void) { return 0; }\n").is_err() {
        return false;
    }
    let probe = out.join("relr-probe");
    let linked = Command::new("cc")
        .args(["-pie", "-fPIE", PACKED, "-o"])
        .arg(&probe)
        .arg(&source)
        .output();
    if !matches!(linked, Ok(o) if o.status.success() && o.stderr.is_empty()) {
        return false;
    }
    let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
    !native || Command::new(&probe).status().is_ok_and(|s| s.success())
}
