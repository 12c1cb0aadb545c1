//! What /proc says of a child process the benchmarks started: resident memory and CPU time.
//! Shared by the benchmarks that measure a served process (serve, parked).

use std::process::{Child, Command};
use std::sync::OnceLock;

/// A server process the benchmark started: killed and reaped when dropped, so a failed
/// benchmark leaves nothing running.
pub struct Started(pub Child);

impl Started {
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A numeric field of /proc/PID/status (`VmRSS:`, `VmHWM:`, `Threads:`...); 0 if unreadable.
pub fn status_field(pid: u32, name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU time process `pid` has used so far (user and system, all threads), in ms.
pub fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // utime and stime are the 14th and 15th fields; the command name (field 2) may hold
    // spaces, so count from its closing parenthesis.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: f64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<f64>().ok())
        .sum();
    ticks * 1000.0 / clock_ticks_per_s()
}

/// The kernel's clock ticks per second, in which /proc reports CPU time.
fn clock_ticks_per_s() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}
