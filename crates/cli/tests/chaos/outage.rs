//! The database goes away under load while research runs are in flight with readers
//! attached: Postgres stopped, or the SQLite file made unwritable (immutable: even root cannot
//! write it). The server stays up, answers the reads it can, refuses what needs the database
//! with 503 and `Retry-After` (never a 500 or a hang), and once the database is back every
//! run completes once, every stream gap-free, nothing lost.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::figures;
use crate::served::*;
use crate::support::*;

/// What one kind of request met while the database was away.
#[derive(Default)]
struct Probe {
    answers: usize,
    /// Answered as it should: 503 with `Retry-After`, or served when it can be.
    well: usize,
    /// Anything else: another status, a 503 without `Retry-After`, no answer in 5 s.
    other: Vec<String>,
    slowest: Duration,
}

/// What a request may be answered while the database is away.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// 503 with `Retry-After`.
    Refused,
    /// Served (a read of a database that can still be read).
    Served,
    /// A health probe: 503 or 200, at once.
    Health,
}

impl Probe {
    async fn send(&mut self, req: reqwest::RequestBuilder, expect: Expect) {
        let sent = Instant::now();
        let answered = req.timeout(Duration::from_secs(5)).send().await;
        self.slowest = self.slowest.max(sent.elapsed());
        self.answers += 1;
        match answered {
            Ok(r)
                if r.status() == 503
                    && (expect == Expect::Health || r.headers().contains_key("retry-after")) =>
            {
                self.well += 1
            }
            Ok(r) if r.status().is_success() && expect != Expect::Refused => self.well += 1,
            Ok(r) => {
                let status = r.status();
                self.other
                    .push(format!("{status}: {}", r.text().await.unwrap_or_default()))
            }
            Err(e) => self.other.push(format!("no answer: {e}")),
        }
    }
}

/// How the database is taken away and given back.
enum Fault {
    PostgresStopped(Cluster),
    SqliteImmutable,
}

impl Fault {
    fn name(&self) -> &'static str {
        match self {
            Fault::PostgresStopped(_) => "Postgres stopped",
            Fault::SqliteImmutable => "SQLite file unwritable",
        }
    }

    /// How reads of a run fare meanwhile: Postgres is gone, SQLite can still be read.
    fn reads(&self) -> Expect {
        match self {
            Fault::PostgresStopped(_) => Expect::Refused,
            Fault::SqliteImmutable => Expect::Served,
        }
    }

    fn take_away(&self, env: &Env) {
        match self {
            Fault::PostgresStopped(cluster) => cluster.stop(),
            Fault::SqliteImmutable => sqlite_files(env, "+i"),
        }
    }

    fn give_back(&self, env: &Env) {
        match self {
            Fault::PostgresStopped(cluster) => cluster.resume(),
            Fault::SqliteImmutable => sqlite_files(env, "-i"),
        }
    }
}

/// Sets (`+i`) or clears (`-i`) the immutable attribute of the SQLite database and its WAL:
/// no process can write them, root included, open handles included. (Where the attribute
/// cannot be set, the file's mode is changed instead, which stops all but root.)
fn sqlite_files(env: &Env, flag: &str) {
    for suffix in ["", "-wal"] {
        let path = format!("{}{suffix}", env.db);
        if !std::path::Path::new(&path).exists() {
            continue;
        }
        let out = std::process::Command::new("chattr")
            .args([flag, &path])
            .output()
            .expect("chattr (e2fsprogs)");
        if out.status.success() {
            continue;
        }
        // Not root (no right to set the attribute): the file mode does it for its owner.
        let mode = if flag == "+i" { "a-w" } else { "u+w" };
        let chmod = std::process::Command::new("chmod")
            .args([mode, &path])
            .status()
            .expect("chmod");
        assert!(
            chmod.success(),
            "chattr {flag} {path}: {out:?}, and chmod {mode} failed"
        );
    }
}

async fn outage(fault: Fault, seconds: u64) {
    let runs = 20;
    let scenario = format!("{} {seconds} s, {runs} runs in flight", fault.name());
    let (mut env, _sqlite) = match &fault {
        Fault::PostgresStopped(cluster) => (env_on(cluster.database().await), None),
        Fault::SqliteImmutable => {
            let (db, dir) = fathom_testkit::db::fresh_url(fathom_store::Dialect::Sqlite).await;
            (env_on(db), dir)
        }
    };
    // Each run holds a moment before committing fetch_parse_sources, so the outage finds
    // runs in the middle of their work; the hold is a sleep, so 16 runs at once (as with a
    // model) rather than the two per core offline research gets.
    with_engine_config(
        &mut env,
        json!({"lease_ttl_seconds": 10, "max_concurrent_runs": 16}),
    );
    let server = Served::spawn(
        &env,
        &["serve", "--worker-id", "outage"],
        &[
            ("FATHOM_CRASH_AT", "fetch_parse_sources:commit"),
            ("FATHOM_CRASH_HOLD_MS", "1500"),
        ],
        "serving deployment",
    );
    let api = server.api();
    let client = http();
    let store = fathom_store::SqlStore::connect(&env.db).await.unwrap();

    // A run that meets no fault: what every run's steps should look like.
    let began = Instant::now();
    let reference = start_run(&client, &api).await;
    approve(&client, &api, &reference).await;
    let reference_seen =
        follow_reconnecting(client.clone(), vec![api.clone()], reference.clone()).await;
    // How long a whole run takes here, unhurried: the bound on finishing after an outage.
    let a_run = began.elapsed();
    assert!(gap_free(&reference_seen.events));

    let ids = start_runs(&client, &api, runs).await;
    let readers: Vec<_> = ids
        .iter()
        .map(|id| {
            tokio::spawn(follow_reconnecting(
                client.clone(),
                vec![api.clone()],
                id.clone(),
            ))
        })
        .collect();
    wait_at_gate(&store, &ids).await;
    for id in &ids {
        approve(&client, &api, id).await;
    }
    server.wait_for_line("crash point fetch_parse_sources:commit reached");

    fault.take_away(&env);
    let stopped = Instant::now();
    let (mut reads, mut writes, mut health) =
        (Probe::default(), Probe::default(), Probe::default());
    while stopped.elapsed() < Duration::from_secs(seconds) {
        // Three clients at once, as they would come.
        tokio::join!(
            reads.send(
                client.get(format!("{api}/handlers/{}", ids[0])),
                fault.reads(),
            ),
            writes.send(
                client
                    .post(format!("{api}/workflows/deep-research/run-nowait"))
                    .json(&json!({"start_event": {"query": QUESTION}})),
                Expect::Refused,
            ),
            health.send(
                client.get(format!("{}/health", server.root)),
                Expect::Health,
            ),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut server = server;
    let up = server.child.try_wait().unwrap().is_none();
    fault.give_back(&env);
    let back = Instant::now();

    let mut seen = Vec::new();
    for reader in readers {
        seen.push(reader.await.unwrap());
    }
    let recovered = back.elapsed();
    let store = fathom_store::SqlStore::connect(&env.db).await.unwrap();
    let outcome = RunsOutcome::read(&store, &client, &server.root, &reference, &ids, &seen).await;
    let RunsOutcome {
        stranded,
        twice,
        ref lost,
        all_runs,
        ..
    } = outcome;

    let probe_row = |name: &str, p: &Probe, expect: Expect| {
        let well = match expect {
            Expect::Refused => "503 + Retry-After",
            Expect::Served | Expect::Health => "served",
        };
        figures::record(
            &scenario,
            &format!("{name} while away: {well} / answered; slowest"),
            format!("{}/{}; {:.2} s", p.well, p.answers, p.slowest.as_secs_f64()),
            "all; < 5 s (no hang)",
            p.other.is_empty() && p.slowest < Duration::from_secs(5),
        );
    };
    probe_row("GET /handlers/{id}", &reads, fault.reads());
    probe_row("POST run-nowait", &writes, Expect::Refused);
    figures::record(
        &scenario,
        "/health while away: answered 503 or 200 / asked; slowest",
        format!(
            "{}/{}; {:.2} s",
            health.well,
            health.answers,
            health.slowest.as_secs_f64()
        ),
        "all; < 5 s (no hang)",
        health.other.is_empty() && health.slowest < Duration::from_secs(5),
    );
    figures::record(&scenario, "server process up throughout", up, "true", up);
    record_runs(&scenario, runs, stranded, twice, &seen);
    figures::record(
        &scenario,
        "last run completed after the database was back",
        format!("{:.1} s", recovered.as_secs_f64()),
        &format!("< lease TTL (10 s) + a run ({:.1} s)", a_run.as_secs_f64()),
        recovered < Duration::from_secs(10) + a_run,
    );
    figures::record(
        &scenario,
        "store vs clients: differences; runs stored (refused starts store nothing)",
        format!("{}; {all_runs}", lost.len()),
        &format!("0; {}", runs + 1),
        lost.is_empty() && all_runs == runs + 1,
    );

    assert!(up, "the server stayed up");
    assert!(
        reads.other.is_empty(),
        "reads while away: {:?}",
        reads.other
    );
    assert!(
        writes.other.is_empty(),
        "writes while away: {:?}",
        writes.other
    );
    assert!(
        health.other.is_empty(),
        "health while away: {:?}",
        health.other
    );
    assert!(reads.well > 0 && writes.well > 0);
    drop(fault);
    // A request that hung past the probes' 5 s timeout is among `other`, checked above.
    outcome.assert_held(runs, "a start refused with 503 stored nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stopped_under_load() {
    outage(Fault::PostgresStopped(Cluster::start()), 10).await;
    if figures::long() {
        outage(Fault::PostgresStopped(Cluster::start()), 60).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_unwritable_under_load() {
    outage(Fault::SqliteImmutable, 10).await;
}
