//! The peak resident memory of a process and of the children it starts (Linux, from
//! `/proc`): each process's `VmHWM`, its own high-water mark, read every few milliseconds
//! while it lives. A child that lives less than one period may be missed; one that lives
//! longer is measured to within what it grew in its last period.
// Unsafe: wait4(2), for a child's peak memory as the kernel counted it.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Peak resident sizes in bytes: of the watched process, and of each child seen, by pid.
#[derive(Debug, Clone, Default)]
pub struct Peaks {
    pub process: u64,
    pub children: HashMap<u32, u64>,
}

impl Peaks {
    /// The largest child's peak (0 if no child was seen).
    pub fn largest_child(&self) -> u64 {
        self.children.values().copied().max().unwrap_or(0)
    }
}

/// Watches `pid` and its children until [`RssWatch::stop`] or the process is gone.
pub struct RssWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Peaks>,
}

impl RssWatch {
    pub fn start(pid: u32, every: Duration) -> RssWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peaks = Peaks::default();
            while !stopped.load(Ordering::SeqCst) {
                let Some(own) = high_water_mark(pid) else {
                    break; // gone
                };
                peaks.process = peaks.process.max(own);
                for child in children(pid) {
                    if let Some(hwm) = high_water_mark(child) {
                        let seen = peaks.children.entry(child).or_default();
                        *seen = (*seen).max(hwm);
                    }
                }
                std::thread::sleep(every);
            }
            peaks
        });
        RssWatch { stop, thread }
    }

    /// The peaks seen so far, ending the watch.
    pub fn stop(self) -> Peaks {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("the watcher does not panic")
    }
}

/// `VmHWM` of `pid` in bytes, if it is alive (a zombie has none).
fn high_water_mark(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Waits until `child` ends or `deadline` passes (then kills it and returns None). On its
/// end: its exit status and the largest peak resident size, in bytes, of it and of every
/// child it waited for (`wait4`'s `ru_maxrss`): exact, however briefly a child lived.
pub fn wait_with_peak(
    child: &mut std::process::Child,
    deadline: std::time::Instant,
) -> Option<(std::process::ExitStatus, u64)> {
    use std::os::unix::process::ExitStatusExt;
    let pid = child.id() as libc::pid_t;
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 writes only into the two locals we pass.
        let done = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if done == pid {
            let peak = u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024;
            return Some((std::process::ExitStatus::from_raw(status), peak));
        }
        if done < 0 || std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
