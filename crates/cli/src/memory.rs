//! Giving freed heap back to the system once a long-lived process is idle.
//!
//! glibc gives threads arenas of their own, up to eight per core, and keeps what is freed in
//! them for reuse. Fathom has many threads that allocate now and then (one per SQLite
//! connection, the blocking pool, the runtime's workers), so after a burst of runs an idle
//! server held memory nothing used: 43 MiB after 20 research runs where it started at 27 MiB.
//! A trim once no run is driven here gives it back, after what was kept for the runs to come
//! is let go too (see [`Kept`]). (Fewer arenas would hold less too, but the threads then wait
//! on each other's allocations: one per core cost research runs over HTTP 10% of their
//! throughput on SQLite.)
// Unsafe: glibc's allocator controls (mallopt, mallinfo2, malloc_trim).
#![allow(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fathom_corpus::Corpus;
use fathom_engine::Engine;
use fathom_research::tools::read::DocCache;
use fathom_store::SqlStore;

/// Fixes the size from which glibc gives an allocation its own mapping at its default, 128 KiB.
/// Left to itself glibc raises it to the largest block freed so far (a parsed book of a few
/// MiB), and each thread's arena then keeps such blocks, freed, at its top, where
/// `malloc_trim` does not reach: an idle server held 2-3 MiB more. Mapped blocks are given
/// back when freed. Research runs cost the same CPU either way (research bench, 45 ms a run).
/// Called before the runtime starts its threads. A threshold set through glibc's own
/// variables (`GLIBC_TUNABLES`, `MALLOC_MMAP_THRESHOLD_`) stands.
pub fn settle_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let tuned = std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
            || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("mmap_threshold"));
        if !tuned {
            // SAFETY: mallopt only sets the allocator's parameters.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
            }
        }
    }
}

/// What a process keeps in memory for the runs to come, let go of once it is idle: its next
/// run is as likely to come in an hour as in a minute, and takes 10 ms more to read its
/// documents again. After ten research runs over the Rust book an idle server held 21-22 MiB
/// of heap where it started with 5-6; it keeps 11-13 MiB now.
pub struct Kept {
    /// The documents runs read, parsed (up to 120,000 words).
    pub docs: DocCache,
    /// The corpus index's connections, each with the pages it read.
    pub corpus: Arc<Corpus>,
}

/// How often an idle process looks at what its heap holds free.
const LOOK_EVERY: Duration = Duration::from_secs(20);
/// Free heap worth handing back: below this, trimming would save less than it costs.
const TRIM_ABOVE: usize = 2 << 20;

/// Hands free heap back to the system when the process has become idle: it drives no run
/// and committed nothing for a whole look (a server in front of other workers still stores
/// deliveries and starts), and since the last trim it committed writes (ran something) or
/// its free heap grew by [`TRIM_ABOVE`] (streams came and went). What was [`Kept`] for the
/// runs to come is let go first, once per idle spell. Free scraps between live allocations,
/// which no trim can give back, are not trimmed for again and again. Runs until the process
/// ends.
pub async fn trim_when_idle(engine: Arc<Engine>, store: Arc<SqlStore>, kept: Kept) {
    let mut looks = tokio::time::interval(LOOK_EVERY);
    looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let commits = || store.stats().commits.load(Ordering::Relaxed);
    let (mut at_trim, mut at_look, mut free_at_trim) = (commits(), commits(), 0);
    // What was kept is let go once per idle spell, whether or not a trim follows.
    let mut at_let_go = commits();
    loop {
        looks.tick().await;
        let now = commits();
        let quiet = now == at_look && engine.runs_driven_here() == 0;
        at_look = now;
        if !quiet {
            continue;
        }
        if now != at_let_go {
            kept.docs.forget();
            kept.corpus.release_memory().await;
            at_let_go = now;
        }
        let ran = now != at_trim;
        // Reading and trimming the arenas takes their locks for a moment: off the runtime.
        match tokio::task::spawn_blocking(move || trim(ran, free_at_trim)).await {
            Ok(Some(free)) => (at_trim, free_at_trim) = (now, free),
            Ok(None) => {}
            Err(_) => return,
        }
    }
}

/// Trims the heap if it holds over [`TRIM_ABOVE`] free and, unless `ran`, over that much more
/// than `free_at_trim`; returns what it held free when it trimmed.
fn trim(ran: bool, free_at_trim: usize) -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 reads the allocator's own bookkeeping; malloc_trim gives whole
        // free pages back. Neither touches memory in use.
        let free = unsafe { libc::mallinfo2() }.fordblks;
        let grown = free > free_at_trim.saturating_add(TRIM_ABOVE);
        if free > TRIM_ABOVE && (ran || grown) {
            // SAFETY: as above: malloc_trim returns only free pages.
            unsafe {
                libc::malloc_trim(0);
            }
            return Some(free);
        }
        None
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (ran, free_at_trim);
        None
    }
}
