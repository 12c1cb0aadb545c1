//! Links `fathom` with packed relative relocations where the toolchain and C library can.
//!
//! A position-independent executable carries one relocation record (24 bytes) for each pointer
//! the loader must adjust at start: 1.7 MB of them for `fathom`, all read at every start and
//! kept resident. Packed (`DT_RELR`, glibc 2.36 and binutils 2.38 or later) they take 21 kB,
//! and an idle server's resident memory is 2 MiB smaller. Where the linker or the C library
//! cannot, the probe fails and the binary is linked as before.
//!
//! Such a binary needs glibc 2.36 or later where it runs. A build meant to run on older
//! systems (Ubuntu 22.04, RHEL 9) is made with `FATHOM_NO_PACKED_RELOCS=1`. Cross builds are
//! linked as before.

use std::path::PathBuf;
use std::process::Command;

const PACKED: &str = "-Wl,-z,pack-relative-relocs";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for var in ["FATHOM_NO_PACKED_RELOCS", "RUSTC_LINKER", "CC"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let target = std::env::var("TARGET").unwrap_or_default();
    let native = std::env::var("HOST").is_ok_and(|h| h == target);
    let opted_out = std::env::var_os("FATHOM_NO_PACKED_RELOCS").is_some_and(|v| v != "0");
    if native && !opted_out && target.ends_with("-linux-gnu") && linker_packs_relocations() {
        println!("cargo:rustc-link-arg-bins={PACKED}");
    }
}

/// Links a trivial C program the way rustc links (through its linker, `cc` unless
/// `RUSTC_LINKER` names another, as a PIE) with the flag, and checks the linker neither
/// refused nor ignored it (older ones only warn) and that the program starts (the C library
/// applies such relocations).
fn linker_packs_relocations() -> bool {
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return false;
    };
    let source = out.join("relr-probe.c");
    if std::fs::write(&source, "int main(void) { return 0; }\n").is_err() {
        return false;
    }
    let probe = out.join("relr-probe");
    let linker = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".into());
    let linked = Command::new(linker)
        .args(["-pie", "-fPIE", PACKED, "-o"])
        .arg(&probe)
        .arg(&source)
        .output();
    if !matches!(linked, Ok(o) if o.status.success() && o.stderr.is_empty()) {
        return false;
    }
    Command::new(&probe).status().is_ok_and(|s| s.success())
}
