//! Engine behaviour over real stores: retries, step timeouts, run deadlines, durable waits
//! across a restart, early approvals, cancellation and bad external events.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use fathom_e2e::{approve_and_finish, wait_for_run};
use fathom_engine::store::{RunStatus, RunStore};
use fathom_engine::{
    Ctx, Engine, EngineConfig, EngineError, ErasedWorkflow, RetryPolicy, StartOptions, StepError,
    StepOptions, Stored, Workflow, impl_event,
};
use fathom_store::Dialect;
use fathom_testkit::db::{TestDb, fresh};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Ask {
    question: String,
}
impl_event!(Ask, "Ask");
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Planned {}
impl_event!(Planned, "Planned");
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct ApproveEvent {
    approved: bool,
    feedback: Option<String>,
}
impl_event!(ApproveEvent, "ApproveEvent");
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Answer {
    text: String,
    rounds: u32,
}
impl_event!(
    Answer,
    "Answer",
    qualified = "tests.Answer",
    types = ["StopEvent"]
);

#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct St {
    rounds: u32,
}

/// Plans, waits for approval (re-planning on rejection), then answers.
fn gated() -> Arc<dyn ErasedWorkflow> {
    gated_noting(0)
}

/// [`gated`] whose answer comes with more notes than a reader reads from the store at once
/// (a page is 256 events), all in the one commit of the approved step.
fn gated_long_answer() -> Arc<dyn ErasedWorkflow> {
    gated_noting(LONG_ANSWER_NOTES)
}

/// [`gated`], streaming `notes` notes with its answer.
fn gated_noting(notes: usize) -> Arc<dyn ErasedWorkflow> {
    Workflow::<St>::new::<Ask>("gated")
        .accepts_external::<ApproveEvent>()
        .step("plan", |ctx: Ctx<St>, _: Ask| async move {
            ctx.edit_state(|s| s.rounds += 1);
            ctx.send(Planned {})
        })
        .step(
            "await_approval",
            move |ctx: Ctx<St>, _: Planned| async move {
                let decision = ctx.wait_for::<ApproveEvent>().await?;
                if !decision.approved {
                    return ctx.send(Ask {
                        question: "again".into(),
                    });
                }
                for i in 0..notes {
                    ctx.write_stream(&Note {
                        text: format!("note {i}"),
                    })?;
                }
                ctx.stop(&Answer {
                    text: decision.feedback.unwrap_or_default(),
                    rounds: ctx.state().rounds,
                })
            },
        )
        .build()
}

const LONG_ANSWER_NOTES: usize = 300;

fn engine(db: &TestDb, owner: &str, wf: Arc<dyn ErasedWorkflow>) -> Arc<Engine> {
    engine_with(db, config(owner, Duration::from_millis(25)), [wf])
}

/// The tests' engine settings: `owner`, looking for runs every `poll`, 5 s leases, 4 runs at
/// a time.
fn config(owner: &str, poll: Duration) -> EngineConfig {
    EngineConfig {
        owner: owner.into(),
        lease_ttl: Duration::from_secs(5),
        poll_interval: poll,
        max_concurrent_runs: 4,
        ..Default::default()
    }
}

fn engine_with(
    db: &TestDb,
    config: EngineConfig,
    workflows: impl IntoIterator<Item = Arc<dyn ErasedWorkflow>>,
) -> Arc<Engine> {
    let engine = workflows.into_iter().fold(
        Engine::new(Arc::new(db.store.clone()), config),
        |engine, wf| engine.register(wf),
    );
    Arc::new(engine)
}

fn run_worker(
    e: &Arc<Engine>,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<fathom_engine::WorkerStopped>,
) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    (tx, tokio::spawn(e.clone().run_worker(rx)))
}

const WAIT: Duration = Duration::from_secs(20);

/// Waits until `done` holds; fails the test saying `what` after [`WAIT`].
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn approval_survives_restart_and_rejection_replans(dialect: Dialect) {
    let db = fresh(dialect).await;
    let a = engine(&db, "proc-a", gated());
    let (stop, worker) = run_worker(&a);
    let run = a
        .start(
            "gated",
            json!({"question": "why?"}),
            StartOptions::default(),
        )
        .await
        .unwrap();
    let parked = wait_for_run(db.store.as_ref_store(), &run.id, WAIT, |r| {
        r.status == RunStatus::Waiting
    })
    .await;
    assert_eq!(parked.waiting_for.as_deref(), Some("ApproveEvent"));
    // The process stops while the run waits: nothing of the run lives in it.
    stop.send(true).unwrap();
    worker.await.unwrap();
    drop(a);

    // Another process delivers a rejection, then an approval; a third drives the run.
    let b = engine(&db, "proc-b", gated());
    b.send(
        &run.id,
        "ApproveEvent",
        json!({"approved": false, "feedback": "narrower"}),
        Some("d1".into()),
    )
    .await
    .unwrap();
    let (_stop_b, _wb) = run_worker(&b);
    wait_for_run(db.store.as_ref_store(), &run.id, WAIT, |r| {
        r.status == RunStatus::Waiting && r.state["rounds"] == 2
    })
    .await;
    b.send(
        &run.id,
        "ApproveEvent",
        json!({"approved": true, "feedback": "go"}),
        Some("d2".into()),
    )
    .await
    .unwrap();
    let done = wait_for_run(db.store.as_ref_store(), &run.id, WAIT, |r| {
        r.status.is_terminal()
    })
    .await;
    assert_eq!(done.status, RunStatus::Completed);
    let result = done.result.unwrap();
    assert_eq!(result.value, json!({"text": "go", "rounds": 2}));
    assert!(result.is_stop());
    // Sending to a finished run is refused.
    let late = b
        .send(
            &run.id,
            "ApproveEvent",
            json!({"approved": true, "feedback": null}),
            None,
        )
        .await;
    assert!(
        matches!(late, Err(EngineError::RunTerminal("completed"))),
        "{late:?}"
    );
}

async fn early_approval_and_bad_events(dialect: Dialect) {
    let db = fresh(dialect).await;
    let e = engine(&db, "proc", gated());
    let run = e
        .start("gated", json!({"question": "q"}), StartOptions::default())
        .await
        .unwrap();
    // Before any worker runs: the approval is kept in the mailbox.
    e.send(
        &run.id,
        "ApproveEvent",
        json!({"approved": true, "feedback": "early"}),
        None,
    )
    .await
    .unwrap();
    let unknown = e.send(&run.id, "Nope", json!({}), None).await.unwrap_err();
    assert_eq!(
        unknown.to_string(),
        "invalid event type: Nope. Expected one of ApproveEvent"
    );
    let invalid = e
        .send(&run.id, "ApproveEvent", json!({"approved": "yes"}), None)
        .await
        .unwrap_err();
    assert!(
        invalid.to_string().starts_with("invalid ApproveEvent:"),
        "{invalid}"
    );
    assert!(matches!(
        e.send("missing", "ApproveEvent", json!({}), None).await,
        Err(EngineError::UnknownRun(_))
    ));
    assert!(matches!(
        e.start("nope", json!({}), StartOptions::default()).await,
        Err(EngineError::UnknownWorkflow(_))
    ));
    let bad_start = e
        .start("gated", json!({"q": 1}), StartOptions::default())
        .await
        .unwrap_err();
    assert!(
        bad_start.to_string().contains("missing field `question`"),
        "{bad_start}"
    );
    let (_s, _w) = run_worker(&e);
    let done = wait_for_run(db.store.as_ref_store(), &run.id, WAIT, |r| {
        r.status.is_terminal()
    })
    .await;
    assert_eq!(done.result.unwrap().value["text"], "early");
}

async fn cancel_a_waiting_run(dialect: Dialect) {
    let db = fresh(dialect).await;
    let e = engine(&db, "proc", gated());
    let (_s, _w) = run_worker(&e);
    let run = e
        .start("gated", json!({"question": "q"}), StartOptions::default())
        .await
        .unwrap();
    wait_for_run(db.store.as_ref_store(), &run.id, WAIT, |r| {
        r.status == RunStatus::Waiting
    })
    .await;
    e.cancel(&run.id).await.unwrap();
    let events = db.store.events_after(&run.id, -1, 10).await.unwrap();
    assert_eq!(
        events.last().unwrap().envelope.event_type,
        "WorkflowCancelledEvent"
    );
    assert!(matches!(
        e.send(
            &run.id,
            "ApproveEvent",
            json!({"approved": true, "feedback": null}),
            None
        )
        .await,
        Err(EngineError::RunTerminal("cancelled"))
    ));
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Go {}
impl_event!(Go, "Go");
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Out {
    attempts: u32,
}
impl_event!(Out, "Out", qualified = "tests.Out", types = ["StopEvent"]);

async fn retries_timeouts_and_deadlines(dialect: Dialect) {
    let db = fresh(dialect).await;
    let tries = Arc::new(AtomicU32::new(0));
    let t = tries.clone();
    let retry = RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
    };
    let flaky = Workflow::<St>::new::<Go>("flaky")
        .step_with(
            "work",
            StepOptions {
                timeout: Duration::from_secs(5),
                retry,
            },
            move |ctx: Ctx<St>, _: Go| {
                let t = t.clone();
                async move {
                    // Fails twice, then succeeds on the third attempt.
                    if t.fetch_add(1, Ordering::SeqCst) < 2 {
                        return Err(StepError::failed("upstream 503"));
                    }
                    ctx.stop(&Out {
                        attempts: ctx.attempt(),
                    })
                }
            },
        )
        .build();
    let slow = Workflow::<St>::new::<Go>("slow")
        .step_with(
            "hang",
            StepOptions {
                timeout: Duration::from_millis(100),
                retry: RetryPolicy {
                    max_attempts: 2,
                    ..retry
                },
            },
            |_ctx: Ctx<St>, _: Go| async move {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            },
        )
        .build();
    let forever = Workflow::<St>::new::<Go>("forever")
        .run_timeout(Duration::from_millis(300))
        .step("loop", |ctx: Ctx<St>, _: Go| async move {
            tokio::time::sleep(Duration::from_millis(40)).await;
            ctx.send(Go {})
        })
        .build();
    let e = engine_with(
        &db,
        config("p", Duration::from_millis(25)),
        [flaky, slow, forever],
    );
    let (_s, _w) = run_worker(&e);
    let store = db.store.as_ref_store();

    let r = e
        .start("flaky", json!({}), StartOptions::default())
        .await
        .unwrap();
    let done = wait_for_run(store, &r.id, WAIT, |r| r.status.is_terminal()).await;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.result.unwrap().value["attempts"], 3);

    let r = e
        .start("slow", json!({}), StartOptions::default())
        .await
        .unwrap();
    let done = wait_for_run(store, &r.id, WAIT, |r| r.status.is_terminal()).await;
    assert_eq!(done.status, RunStatus::Failed);
    let last = store
        .events_after(&r.id, -1, 10)
        .await
        .unwrap()
        .pop()
        .unwrap()
        .envelope;
    assert_eq!(last.event_type, "WorkflowFailedEvent");
    assert_eq!(last.value["step_name"], "hang");
    assert_eq!(last.value["attempts"], 2);
    assert!(
        last.value["exception"]["exception_message"]
            .as_str()
            .unwrap()
            .contains("timed out")
    );

    let r = e
        .start("forever", json!({}), StartOptions::default())
        .await
        .unwrap();
    let done = wait_for_run(store, &r.id, WAIT, |r| r.status.is_terminal()).await;
    assert_eq!(done.status, RunStatus::Failed);
    let last = store
        .events_after(&r.id, -1, 100)
        .await
        .unwrap()
        .pop()
        .unwrap()
        .envelope;
    assert_eq!(last.event_type, "WorkflowTimedOutEvent");
    assert_eq!(last.value["active_steps"], json!(["loop"]));
    assert!(done.error.unwrap().contains("timed out"));
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Note {
    text: String,
}
impl_event!(Note, "Note");

fn note(text: &str) -> fathom_engine::Envelope {
    fathom_engine::Envelope::of(&Note { text: text.into() }).unwrap()
}

/// Journaled calls put their stream events on the stream with their results (each once,
/// even when the step runs again), parallel calls included; a stream write while a call is
/// in flight is refused. The step streams, then fails as a transient fault would, and is run
/// again: each event is on the stream once, with no gap and no repeat (a stream written
/// twice by a retried step, dbos-transact-py#770).
async fn journaled_calls_stream_with_their_results(dialect: Dialect) {
    let db = fresh(dialect).await;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let wf = Workflow::<St>::new::<Go>("fan")
        .step_with(
            "fan",
            StepOptions {
                timeout: Duration::from_secs(5),
                retry: RetryPolicy {
                    max_attempts: 2,
                    initial_backoff: Duration::from_millis(10),
                    max_backoff: Duration::from_millis(10),
                },
            },
            move |ctx: Ctx<St>, _: Go| {
                let c = c.clone();
                async move {
                    ctx.write_stream(&Note {
                        text: "start".into(),
                    })?;
                    let call = |name: &'static str, pause: u64| {
                        let (ctx, c) = (ctx.clone(), c.clone());
                        async move {
                            ctx.run_streamed(
                                name,
                                vec![note(&format!("{name} called"))],
                                || async move {
                                    c.fetch_add(1, Ordering::SeqCst);
                                    tokio::time::sleep(Duration::from_millis(pause)).await;
                                    Ok::<_, String>(name.len())
                                },
                                |n| Ok(vec![note(&format!("{name} answered {n}"))]),
                            )
                            .await
                        }
                    };
                    // On the first attempt the calls are still running 20 ms in (on the retry
                    // they come from the journal at once, so there is nothing to meddle with).
                    let first = ctx.attempt() == 1;
                    let meddler = async {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        first.then(|| {
                            ctx.write_stream(&Note {
                                text: "meddle".into(),
                            })
                        })
                    };
                    let (a, b, meddled) = tokio::join!(call("a", 400), call("bb", 50), meddler);
                    if let Some(meddled) = meddled {
                        let refused = meddled.unwrap_err().to_string();
                        assert!(refused.contains("while a journaled call runs"), "{refused}");
                    }
                    assert_eq!((a?, b?), (1, 2));
                    if ctx.attempt() == 1 {
                        // Both results are journaled; the retry must not call or show them again.
                        return Err(StepError::failed("fails once after its calls"));
                    }
                    ctx.write_stream(&Note { text: "end".into() })?;
                    ctx.stop(&Out {
                        attempts: ctx.attempt(),
                    })
                }
            },
        )
        .build();
    let e = engine(&db, "w1", wf);
    let (stop, worker) = run_worker(&e);
    let run = e
        .start("fan", json!({}), StartOptions::default())
        .await
        .unwrap();
    let done = wait_for_run(db.store.as_ref_store(), &run.id, WAIT, |r| {
        r.status.is_terminal()
    })
    .await;
    stop.send(true).unwrap();
    worker.await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        done.result.unwrap().value["attempts"],
        2,
        "the step failed once after streaming and was run again"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2, "each call ran once");
    let events = db.store.events_after(&run.id, -1, 100).await.unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..events.len() as i64).collect::<Vec<_>>());
    let texts: Vec<String> = events
        .iter()
        .filter(|e| e.envelope.event_type == "Note")
        .map(|e| e.envelope.value["text"].as_str().unwrap().to_string())
        .collect();
    // "bb" finishes first; "start" goes with the call that started first ("a").
    assert_eq!(
        texts,
        [
            "bb called",
            "bb answered 2",
            "start",
            "a called",
            "a answered 1",
            "end"
        ]
    );
    assert_eq!(events.last().unwrap().envelope.event_type, "Out");
}

/// A reader in one process follows a run that another process drives, woken without
/// polling per reader: on Postgres by the change feed alone (the reader's own poll interval
/// is far longer than the test's deadline), on SQLite by the one poller of its process. The
/// reader has read everything before the approval, and the approved step commits more events
/// than one read of the store returns: the reader reads on to the end.
async fn a_reader_follows_a_run_another_process_drives(dialect: Dialect) {
    follow_from_afar(dialect, false).await;
}

/// On Postgres, a reader whose change feed lost its connection as the run moved on still
/// reads it to its end: the feed says it was cut, and once connected again every reader
/// looks for what it may have missed (the notices sent meanwhile are gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_reads_on_after_its_change_feed_was_cut() {
    follow_from_afar(Dialect::Postgres, true).await;
}

/// The scenario of the two tests above; `cut_feed` cuts the change feed's connection just
/// before the approval.
async fn follow_from_afar(dialect: Dialect, cut_feed: bool) {
    let db = fresh(dialect).await;
    let poll = match dialect {
        Dialect::Postgres => Duration::from_secs(600),
        Dialect::Sqlite => Duration::from_millis(25),
    };
    let reader = engine_with(&db, config("reader", poll), [gated_long_answer()]);
    let relay = db.store.relay_changes(reader.clone());
    assert_eq!(relay.is_some(), dialect == Dialect::Postgres);
    let driver = engine(&db, "driver", gated_long_answer());
    let (stop, worker) = run_worker(&driver);
    let run = reader
        .start("gated", json!({"question": "q"}), StartOptions::default())
        .await
        .unwrap();
    let mut follower = reader.follow(&run.id, -1);
    parked_with_the_reader_in_step(&db, &run.id, &mut follower).await;
    if cut_feed {
        wait_until("the change feed never connected", || reader.relay_live()).await;
        // The run moves on at once, while the feed is down.
        let cut: i64 = sqlx::query_scalar(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%'",
        )
        .fetch_one(db.store.pool())
        .await
        .unwrap();
        assert_eq!(cut, 1, "one change feed connection");
    }
    reader
        .send(
            &run.id,
            "ApproveEvent",
            json!({"approved": true, "feedback": "from afar"}),
            None,
        )
        .await
        .unwrap();
    let (seqs, last) = read_to_the_end(&mut follower).await;
    assert_eq!(seqs, (0..seqs.len() as i64).collect::<Vec<_>>(), "gap-free");
    assert!(seqs.len() > LONG_ANSWER_NOTES, "{} events", seqs.len());
    let last = last.expect("the stream ends with the result");
    assert!(last.is_stop());
    assert_eq!(last.value["text"], json!("from afar"));
    stop.send(true).unwrap();
    worker.await.unwrap();
    if let Some(relay) = relay {
        relay.abort();
    }
}

/// Waits until run `run_id` parks, then checks that `follower` is in step with it: it read
/// what there was and hands out nothing more for a while.
async fn parked_with_the_reader_in_step(
    db: &TestDb,
    run_id: &str,
    follower: &mut fathom_engine::Follower,
) {
    let parked = wait_for_run(db.store.as_ref_store(), run_id, WAIT, |r| {
        r.status == RunStatus::Waiting
    })
    .await;
    assert_eq!(parked.status, RunStatus::Waiting);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), follower.next())
            .await
            .is_err(),
        "nothing to hand out before the approval"
    );
}

/// What `follower` hands out until its run's stream ends: the sequence numbers, and the last
/// event.
async fn read_to_the_end(
    follower: &mut fathom_engine::Follower,
) -> (Vec<i64>, Option<fathom_engine::Envelope>) {
    let mut seqs = Vec::new();
    let mut last = None;
    // Bounded by the deadline and the run's stream.
    while let Some(ev) = tokio::time::timeout(WAIT, follower.next())
        .await
        .expect("the run's events arrive")
        .unwrap()
    {
        seqs.push(ev.seq);
        last = Some(ev.envelope);
    }
    (seqs, last)
}

trait AsRefStore {
    fn as_ref_store(&self) -> &dyn RunStore;
}
impl AsRefStore for fathom_store::SqlStore {
    fn as_ref_store(&self) -> &dyn RunStore {
        self
    }
}

/// Version 1 of a workflow: it drafts a title, looks something up (journaled), and waits.
mod v1 {
    use super::*;

    #[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
    pub struct St {
        pub rounds: u32,
    }
    #[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
    pub struct Drafted {
        pub title: String,
    }
    impl_event!(Drafted, "Drafted");

    pub fn workflow() -> Arc<dyn ErasedWorkflow> {
        Workflow::<St>::new::<Ask>("versioned")
            .accepts_external::<ApproveEvent>()
            .step("draft", |ctx: Ctx<St>, ask: Ask| async move {
                ctx.edit_state(|s| s.rounds += 1);
                ctx.send(Drafted {
                    title: ask.question,
                })
            })
            .step("await_approval", |ctx: Ctx<St>, d: Drafted| async move {
                let hits: Value = ctx
                    .run("lookup", || async { Ok::<_, String>(json!({"hits": 3})) })
                    .await?;
                ctx.wait_for::<ApproveEvent>().await?;
                ctx.stop(&Answer {
                    text: format!("{} {hits}", d.title),
                    rounds: ctx.state().rounds,
                })
            })
            .build()
    }
}

/// Version 2 stores differently (a state field, a step event's field and a journaled
/// result's shape changed) and says how version 1's forms read in it.
mod v2 {
    use super::*;

    #[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
    pub struct St {
        pub attempts: u32,
    }
    #[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
    pub struct Drafted {
        pub heading: String,
    }
    impl_event!(Drafted, "Drafted");
    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct Lookup {
        pub hits: Vec<u32>,
    }

    pub fn workflow(lookups: Arc<AtomicU32>) -> Arc<dyn ErasedWorkflow> {
        Workflow::<St>::new::<Ask>("versioned")
            .accepts_external::<ApproveEvent>()
            .stored_format(2, |from, what, mut value| {
                assert_eq!(from, 1);
                let rename = |v: &mut Value, old: &str, new: &str| {
                    let moved = v
                        .as_object_mut()
                        .and_then(|o| o.remove(old))
                        .ok_or_else(|| format!("no '{old}' in {v}"))?;
                    v[new] = moved;
                    Ok::<_, String>(())
                };
                match what {
                    Stored::State => rename(&mut value, "rounds", "attempts")?,
                    Stored::StepEvent("Drafted") => rename(&mut value, "title", "heading")?,
                    Stored::CallResult("lookup") => value["hits"] = json!([value["hits"]]),
                    _ => {}
                }
                Ok(value)
            })
            .step("draft", |ctx: Ctx<St>, ask: Ask| async move {
                ctx.edit_state(|s| s.attempts += 1);
                ctx.send(Drafted {
                    heading: ask.question,
                })
            })
            .step("await_approval", move |ctx: Ctx<St>, d: Drafted| {
                let lookups = lookups.clone();
                async move {
                    let found: Lookup = ctx
                        .run("lookup", || async move {
                            lookups.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, String>(Lookup { hits: vec![9, 9] })
                        })
                        .await?;
                    ctx.wait_for::<ApproveEvent>().await?;
                    ctx.stop(&Answer {
                        text: format!("{} {:?}", d.heading, found.hits),
                        rounds: ctx.state().attempts,
                    })
                }
            })
            .build()
    }
}

/// A run parked by version 1 (state, a pending step event and a journaled result in its
/// forms) completes under version 2: upgraded whole when claimed, the journaled call not made
/// again. A run version 2 started is left alone by a version 1 process, which says why.
async fn a_run_stored_by_an_older_version_is_upgraded(dialect: Dialect) {
    let db = fresh(dialect).await;
    let old = engine(&db, "old", v1::workflow());
    let run = old
        .start(
            "versioned",
            json!({"question": "tides"}),
            StartOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(old.drive_run(&run.id).await.unwrap(), RunStatus::Waiting);
    assert_eq!(run.format, 1);
    drop(old);

    let lookups = Arc::new(AtomicU32::new(0));
    let new = engine(&db, "new", v2::workflow(lookups.clone()));
    new.send(&run.id, "ApproveEvent", json!({"approved": true}), None)
        .await
        .unwrap();
    assert_eq!(new.drive_run(&run.id).await.unwrap(), RunStatus::Completed);
    let done = db.store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(done.format, 2);
    assert_eq!(done.state, json!({"attempts": 1}));
    assert_eq!(
        done.result.unwrap().value,
        json!({"text": "tides [3]", "rounds": 1}),
        "the old journaled result, upgraded, not a new call"
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 0);

    // During a deploy the old version meets a run the new one started: it leaves it.
    let newer = new
        .start(
            "versioned",
            json!({"question": "moon"}),
            StartOptions::default(),
        )
        .await
        .unwrap();
    let old = engine(&db, "old", v1::workflow());
    let refused = old.drive_run(&newer.id).await.unwrap_err();
    assert!(
        matches!(
            refused,
            EngineError::NewerFormat {
                format: 2,
                supported: 1,
                ..
            }
        ),
        "{refused}"
    );
    let untouched = db.store.get_run(&newer.id).await.unwrap().unwrap();
    assert_eq!(
        (untouched.state, untouched.next_seq),
        (json!({"attempts": 0}), 0)
    );
    assert_eq!(new.drive_run(&newer.id).await.unwrap(), RunStatus::Waiting);
}

/// An approval that lands the moment its run parks, while the run's driver is still letting
/// go here, is taken up at once by this process's worker, which does not look for work by
/// itself (a poll interval longer than the test): nothing but the approval and the driver
/// letting go can make it look. Each run is approved as soon as its plan is committed, so
/// the approval lands before, as or after it parks.
async fn an_approval_landing_as_the_run_parks_is_taken_up_without_polling(dialect: Dialect) {
    let db = fresh(dialect).await;
    let e = engine_with(
        &db,
        EngineConfig {
            lease_ttl: Duration::from_secs(600),
            ..config("only", Duration::from_secs(600))
        },
        [gated()],
    );
    let _relay = db.store.relay_changes(e.clone());
    let (stop, worker) = run_worker(&e);
    // Bounded: 40 runs, each within its deadline.
    for i in 0..40 {
        let run = e
            .start("gated", json!({"question": "q"}), StartOptions::default())
            .await
            .unwrap();
        // As soon as the plan is committed: the approval races the run's parking.
        let ended = approve_and_finish(
            &e,
            &run.id,
            |r| r.status == RunStatus::Waiting || r.state["rounds"] == 1,
            ("ApproveEvent", json!({"approved": true})),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(
            ended.map(|r| r.status),
            Some(RunStatus::Completed),
            "run {i} stood still after its approval was sent"
        );
    }
    stop.send(true).unwrap();
    worker.await.unwrap();
}

/// A worker woken all the time (runs starting and ending here more often than its poll
/// interval) still looks for runs whose holder died, and takes them over.
async fn a_busy_worker_still_takes_over_a_run_whose_holder_died(dialect: Dialect) {
    let db = fresh(dialect).await;
    let quick = Workflow::<St>::new::<Go>("quick")
        .step("work", |ctx: Ctx<St>, _: Go| async move {
            ctx.stop(&Out { attempts: 1 })
        })
        .build();
    let e = engine_with(&db, config("busy", Duration::from_millis(300)), [quick]);
    let store = db.store.as_ref_store();
    // A run whose holder took it for one second and died.
    let orphan = e
        .start("quick", json!({}), StartOptions::default())
        .await
        .unwrap();
    let taken = store
        .claim_runs("dead", 1_000, &[], &[], 1, false)
        .await
        .unwrap();
    assert_eq!(taken.runs.len(), 1, "the dead holder took the run");
    let (stop, worker) = run_worker(&e);
    // Work starts here every 50 ms, six times per poll interval.
    let busy = {
        let e = e.clone();
        tokio::spawn(async move {
            loop {
                e.start("quick", json!({}), StartOptions::default())
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let done = wait_for_run(store, &orphan.id, WAIT, |r| r.status.is_terminal()).await;
    assert_eq!(done.status, RunStatus::Completed);
    busy.abort();
    stop.send(true).unwrap();
    worker.await.unwrap();
}

/// Steps of the slot test's workflow in progress now, and the most there ever were.
#[derive(Default)]
struct InStep {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl InStep {
    async fn work(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(15)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A run started or approved here is taken up under this process's lease when a slot is free
/// (no claim, no wait for the worker to look), and the slots bound runs however they came:
/// never more steps at once than slots, and none lost: every run completes.
async fn runs_started_or_approved_here_share_the_slots_with_claimed_ones(dialect: Dialect) {
    let db = fresh(dialect).await;
    let in_step = Arc::new(InStep::default());
    let (plan, answer) = (in_step.clone(), in_step.clone());
    let wf = Workflow::<St>::new::<Ask>("counted")
        .accepts_external::<ApproveEvent>()
        .step("plan", move |ctx: Ctx<St>, _: Ask| {
            let in_step = plan.clone();
            async move {
                in_step.work().await;
                ctx.send(Planned {})
            }
        })
        .step("answer", move |ctx: Ctx<St>, _: Planned| {
            let in_step = answer.clone();
            async move {
                ctx.wait_for::<ApproveEvent>().await?;
                in_step.work().await;
                ctx.stop(&Answer {
                    text: "done".into(),
                    rounds: 1,
                })
            }
        })
        .build();
    let slots = 2;
    let config = EngineConfig {
        max_concurrent_runs: slots,
        ..config("slots", Duration::from_millis(25))
    };
    let e = engine_with(&db, config, [wf]);
    let (stop, worker) = run_worker(&e);
    let mut runs = tokio::task::JoinSet::new();
    for i in 0..10 {
        let e = e.clone();
        runs.spawn(async move {
            let run = e
                .start(
                    "counted",
                    json!({"question": format!("q{i}")}),
                    StartOptions::default(),
                )
                .await
                .unwrap();
            approve_and_finish(
                &e,
                &run.id,
                |r| r.status == RunStatus::Waiting,
                ("ApproveEvent", json!({"approved": true})),
                WAIT,
            )
            .await
            .expect("the run ends")
        });
    }
    let runs = runs.join_all().await;
    assert!(runs.iter().all(|r| r.status == RunStatus::Completed));
    let peak = in_step.peak.load(Ordering::SeqCst);
    assert!(peak <= slots, "{peak} steps ran at once with {slots} slots");
    stop.send(true).unwrap();
    worker.await.unwrap();
}

/// A run started here is driven knowing its mailbox empty, so its first wait parks without
/// reading it; an approval delivered in between is still taken up, not slept through.
async fn an_approval_sent_before_a_run_started_here_first_parks_is_taken_up(dialect: Dialect) {
    let db = fresh(dialect).await;
    let approval_sent = Arc::new(tokio::sync::Notify::new());
    let sent = approval_sent.clone();
    let wf = Workflow::<St>::new::<Ask>("held")
        .accepts_external::<ApproveEvent>()
        .step("plan", move |ctx: Ctx<St>, _: Ask| {
            let sent = sent.clone();
            async move {
                // Holds the run before its wait until the approval is in its mailbox.
                sent.notified().await;
                ctx.send(Planned {})
            }
        })
        .step("answer", |ctx: Ctx<St>, _: Planned| async move {
            let decision = ctx.wait_for::<ApproveEvent>().await?;
            ctx.stop(&Answer {
                text: decision.feedback.unwrap_or_default(),
                rounds: 1,
            })
        })
        .build();
    let e = engine_with(&db, config("early", Duration::from_secs(30)), [wf]);
    let (stop, worker) = run_worker(&e);
    // The worker is up before the start, so the run is taken at once.
    wait_until("the worker never started", || e.is_taking_runs()).await;
    let run = e
        .start("held", json!({"question": "q"}), StartOptions::default())
        .await
        .unwrap();
    e.send(
        &run.id,
        "ApproveEvent",
        json!({"approved": true, "feedback": "early"}),
        None,
    )
    .await
    .unwrap();
    approval_sent.notify_one();
    let done = wait_for_run(db.store.as_ref_store(), &run.id, WAIT, |r| {
        r.status.is_terminal()
    })
    .await;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.result.unwrap().value["text"], "early");
    stop.send(true).unwrap();
    worker.await.unwrap();
}

/// An approval sent once the plan is on the stream, before the step that waits for it has
/// looked (temporal-sa/money-transfer-demo#8, inngest#1433): kept in the run's mailbox and
/// taken up by the wait, not lost. The waiting step is held before its wait until the
/// approval is in, so the run cannot have parked before it arrived.
async fn an_approval_sent_between_the_plan_event_and_the_wait_is_taken_up(dialect: Dialect) {
    let db = fresh(dialect).await;
    let (release, released) = tokio::sync::watch::channel(false);
    let wf = Workflow::<St>::new::<Ask>("prompted")
        .accepts_external::<ApproveEvent>()
        .decision::<ApproveEvent>()
        .step("draft_plan", |ctx: Ctx<St>, _: Ask| async move {
            ctx.write_stream(&Note {
                text: "the plan".into(),
            })?;
            ctx.send(Planned {})
        })
        .step("await_approval", move |ctx: Ctx<St>, _: Planned| {
            let mut released = released.clone();
            async move {
                // Held before its wait until the approval is in (each time it runs).
                let _ = released.wait_for(|r| *r).await;
                let decision = ctx.wait_for::<ApproveEvent>().await?;
                ctx.stop(&Answer {
                    text: decision.feedback.unwrap_or_default(),
                    rounds: 1,
                })
            }
        })
        .build();
    let e = engine(&db, "between", wf);
    let (stop, worker) = run_worker(&e);
    let store = db.store.as_ref_store();
    let run = e
        .start(
            "prompted",
            json!({"question": "q"}),
            StartOptions::default(),
        )
        .await
        .unwrap();
    // The plan is on the stream: a client has read it and decides.
    let deadline = std::time::Instant::now() + WAIT;
    while store
        .events_after(&run.id, -1, 10)
        .await
        .unwrap()
        .is_empty()
    {
        assert!(std::time::Instant::now() < deadline, "the plan never came");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(
        (before.status, before.waiting_for),
        (RunStatus::Running, None),
        "the wait is not registered yet"
    );
    e.send(
        &run.id,
        "ApproveEvent",
        json!({"approved": true, "feedback": "between"}),
        None,
    )
    .await
    .unwrap();
    release.send(true).unwrap();
    let done = wait_for_run(store, &run.id, WAIT, |r| r.status.is_terminal()).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.result.unwrap().value["text"], "between");
    let events = store.events_after(&run.id, -1, 10).await.unwrap();
    let types: Vec<(i64, &str)> = events
        .iter()
        .map(|e| (e.seq, e.envelope.event_type.as_str()))
        .collect();
    assert_eq!(types, [(0, "Note"), (1, "Answer")]);
    stop.send(true).unwrap();
    worker.await.unwrap();
}

/// A step that panics takes its driver down, not the worker: the run's slot and its place
/// among the runs driven here are given back, and its heartbeat stops, so the next run is
/// driven at once and the panicked one is taken over once its lease runs out.
async fn a_step_that_panics_gives_its_slot_back(dialect: Dialect) {
    let db = fresh(dialect).await;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let wf = Workflow::<St>::new::<Go>("fragile")
        .step("work", move |ctx: Ctx<St>, _: Go| {
            let c = c.clone();
            async move {
                if c.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("a bug in the first call of a step");
                }
                ctx.stop(&Out {
                    attempts: ctx.attempt(),
                })
            }
        })
        .build();
    let config = EngineConfig {
        max_concurrent_runs: 1,
        lease_ttl: Duration::from_secs(1),
        ..config("fragile", Duration::from_millis(25))
    };
    let e = engine_with(&db, config, [wf]);
    let (stop, worker) = run_worker(&e);
    let store = db.store.as_ref_store();
    let panicked = e
        .start("fragile", json!({}), StartOptions::default())
        .await
        .unwrap();
    wait_until("the first run never ran", || {
        calls.load(Ordering::SeqCst) > 0
    })
    .await;
    let next = e
        .start("fragile", json!({}), StartOptions::default())
        .await
        .unwrap();
    for id in [&next.id, &panicked.id] {
        let done = wait_for_run(store, id, WAIT, |r| r.status.is_terminal()).await;
        assert_eq!(done.status, RunStatus::Completed, "run {id}");
    }
    stop.send(true).unwrap();
    worker.await.unwrap();
}

/// [`gated`] that streams a note when it plans and three with its answer.
fn gated_with_notes() -> Arc<dyn ErasedWorkflow> {
    Workflow::<St>::new::<Ask>("noted")
        .accepts_external::<ApproveEvent>()
        .step("plan", |ctx: Ctx<St>, _: Ask| async move {
            ctx.write_stream(&Note {
                text: "planned".into(),
            })?;
            ctx.send(Planned {})
        })
        .step("await_approval", |ctx: Ctx<St>, _: Planned| async move {
            ctx.wait_for::<ApproveEvent>().await?;
            for i in 0..3 {
                ctx.write_stream(&Note {
                    text: format!("found {i}"),
                })?;
            }
            ctx.stop(&Answer {
                text: "done".into(),
                rounds: 1,
            })
        })
        .build()
}

/// A reader of a run driven in its own process takes what the run's commits stream as they
/// land, without reading any of it back from the store: not when the run parks, not when the
/// change feed echoes the process's own commit (Postgres), not when the driver lets go after
/// the last one. Each such read was a round trip between an approval and the reader's first
/// event of the approved step.
async fn a_reader_of_a_run_driven_here_reads_nothing_back(dialect: Dialect) {
    let db = fresh(dialect).await;
    // On SQLite the process's poller looks for changed runs every 25 ms meanwhile, and sees
    // this process's own commits among them.
    let e = engine_with(
        &db,
        config("only", Duration::from_millis(25)),
        [gated_with_notes()],
    );
    let relay = db.store.relay_changes(e.clone());
    if relay.is_some() {
        wait_until("the change feed never connected", || e.relay_live()).await;
    }
    let (stop, worker) = run_worker(&e);
    wait_until("the worker never started", || e.is_taking_runs()).await;
    // Followed before it starts: the first commit's news reaches the reader too.
    let mut follower = e.follow("noted-1", -1);
    let run = e
        .start(
            "noted",
            json!({"question": "q"}),
            StartOptions {
                run_id: Some("noted-1".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let planned = tokio::time::timeout(WAIT, follower.next())
        .await
        .expect("the plan's note arrives")
        .unwrap()
        .expect("a first event");
    assert_eq!(planned.envelope.value["text"], "planned");
    let reads = || db.store.stats().stream_reads.load(Ordering::Relaxed);
    let before = reads();
    // Its wait is long enough for the change feed's echo of the parking commit to come and
    // go, and for the poller (SQLite) to look several times.
    parked_with_the_reader_in_step(&db, &run.id, &mut follower).await;
    e.send(&run.id, "ApproveEvent", json!({"approved": true}), None)
        .await
        .unwrap();
    let (after_plan, last) = read_to_the_end(&mut follower).await;
    let seqs: Vec<i64> = std::iter::once(planned.seq).chain(after_plan).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4], "gap-free, each once");
    assert!(last.expect("a stop event").is_stop());
    assert_eq!(
        reads() - before,
        0,
        "the reader read the stream back from the store after it was in step"
    );
    stop.send(true).unwrap();
    worker.await.unwrap();
    if let Some(relay) = relay {
        relay.abort();
    }
}

/// On Postgres a worker is woken by other processes' notices of work, and only by those of
/// workflows it drives: beside a busy server of another workflow, it does not look for runs
/// each time one starts there (it would find nothing it may take).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_woken_only_by_work_of_its_own_workflows() {
    let db = fresh(Dialect::Postgres).await;
    let idle = engine_with(
        &db,
        config("idle", Duration::from_secs(600)),
        [gated_with_notes()],
    );
    let relay = db.store.relay_changes(idle.clone()).expect("a change feed");
    wait_until("the change feed never connected", || idle.relay_live()).await;
    let (stop, worker) = run_worker(&idle);
    wait_until("the worker never started", || idle.is_taking_runs()).await;
    // Another process, with no worker of its own: what it starts waits for one.
    let elsewhere = fathom_store::SqlStore::connect(&db.url).await.unwrap();
    let busy = Arc::new(
        Engine::new(
            Arc::new(elsewhere),
            config("busy", Duration::from_secs(600)),
        )
        .register(gated())
        .register(gated_with_notes()),
    );
    let looks = || db.store.stats().claim_looks.load(Ordering::Relaxed);
    // Starts a run of the idle worker's workflow elsewhere; the idle worker takes and parks it.
    let own_run_taken = || async {
        let run = busy
            .start("noted", json!({"question": "q"}), StartOptions::default())
            .await
            .unwrap();
        let parked = wait_for_run(db.store.as_ref_store(), &run.id, WAIT, |r| {
            r.status == RunStatus::Waiting
        })
        .await;
        assert_eq!(parked.status, RunStatus::Waiting, "the idle worker took it");
    };
    // One first: the looks the start-up woke (the change feed going live wakes the worker)
    // are over by then.
    own_run_taken().await;
    let before = looks();
    for _ in 0..10 {
        busy.start("gated", json!({"question": "q"}), StartOptions::default())
            .await
            .unwrap();
    }
    // Then another of its own: its notice comes after the others' (one channel, in commit
    // order).
    own_run_taken().await;
    assert_eq!(
        looks() - before,
        1,
        "the worker looked for runs on notices of another workflow's runs"
    );
    stop.send(true).unwrap();
    worker.await.unwrap();
    relay.abort();
}

macro_rules! both {
    ($($case:ident),*) => {
        mod sqlite { $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(super::Dialect::Sqlite).await })* }
        mod postgres { $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(super::Dialect::Postgres).await })* }
    };
}
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Hop {
    i: u32,
}
impl_event!(Hop, "Hop");

/// Quick steps run back to back are committed together: a run of four hops after its first
/// step is two step commits (the steps up to the one that makes a journaled call, which needs
/// its event stored first, then that step), not five. Nothing a reader or a crash could tell
/// apart is lost: every step's events are on the stream once and in order, every step ran
/// to a commit once (a row each in the step journal), the call ran once, and the state each
/// step left is what the next one saw.
async fn quick_steps_share_a_commit_and_a_call_stores_its_event_first(dialect: Dialect) {
    let db = fresh(dialect).await;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let wf = Workflow::<St>::new::<Go>("hops")
        .step("first", |ctx: Ctx<St>, _: Go| async move {
            ctx.edit_state(|s| s.rounds = 1);
            ctx.write_stream(&Note {
                text: "first".into(),
            })?;
            ctx.send(Hop { i: 1 })
        })
        .step("hop", move |ctx: Ctx<St>, ev: Hop| {
            let c = c.clone();
            async move {
                // The state the step before left, committed or not.
                assert_eq!(
                    ctx.state().rounds,
                    ev.i,
                    "hop {} saw the state before it",
                    ev.i
                );
                ctx.edit_state(|s| s.rounds += 1);
                ctx.write_stream(&Note {
                    text: format!("hop {}", ev.i),
                })?;
                if ev.i < 4 {
                    return ctx.send(Hop { i: ev.i + 1 });
                }
                let key = ctx.idempotency_key("side")?;
                let n = ctx
                    .run("side", || async move {
                        Ok::<_, String>(c.fetch_add(1, Ordering::SeqCst) + 1)
                    })
                    .await?;
                assert!(key.starts_with(&format!("{}:", ctx.run_id())), "{key}");
                ctx.stop(&Out { attempts: n })
            }
        })
        .build();
    // However slow the machine, the steps are chained (the default wait is 5 ms), and no
    // lease renewal lands among the commits counted.
    let config = EngineConfig {
        chain_wait: Duration::from_secs(10),
        lease_ttl: Duration::from_secs(120),
        ..config("w1", Duration::from_millis(25))
    };
    let e = engine_with(&db, config, [wf]);
    let (stop, worker) = run_worker(&e);
    // Started here once the worker takes runs: created under this process's lease, no claim.
    wait_until("the worker never started", || e.is_taking_runs()).await;
    let before = db.store.stats().commits.load(Ordering::Relaxed);
    let run = e
        .start("hops", json!({}), StartOptions::default())
        .await
        .unwrap();
    let done = wait_for_run(db.store.as_ref_store(), &run.id, WAIT, |r| {
        r.status.is_terminal()
    })
    .await;
    // Read once the run's driver is done (it counts the last commit after writing it), and
    // before the worker stops (it lets its leases go then).
    wait_until("the driver never let go", || e.runs_driven_here() == 0).await;
    let commits = db.store.stats().commits.load(Ordering::Relaxed) - before;
    stop.send(true).unwrap();
    worker.await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the call ran once");
    let events = db.store.events_after(&run.id, -1, 100).await.unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..events.len() as i64).collect::<Vec<_>>());
    let texts: Vec<&str> = events
        .iter()
        .filter(|e| e.envelope.event_type == "Note")
        .map(|e| e.envelope.value["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["first", "hop 1", "hop 2", "hop 3", "hop 4"]);
    assert_eq!(events.last().unwrap().envelope.value["attempts"], 1);
    let journal: Vec<(String, String)> =
        sqlx::query_as("SELECT step, outcome FROM step_journal WHERE run_id = $1 ORDER BY id")
            .bind(&run.id)
            .fetch_all(db.store.pool())
            .await
            .unwrap();
    let steps: Vec<&str> = journal.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(steps, ["first", "hop", "hop", "hop", "hop"], "{journal:?}");
    assert_eq!(journal[4].1, "completed");
    // The start, the four steps up to the call, the call's result, the step with the call
    // (seven with each step committed alone).
    assert_eq!(commits, 4, "commits for the run");
}

/// A step that panics when run ahead of its predecessor's commit does not take that
/// predecessor's work down with it at every try: the next try commits the predecessor alone,
/// and its events reach the stream, though the step keeps panicking.
async fn a_chained_step_that_panics_lets_the_steps_before_it_commit(dialect: Dialect) {
    let db = fresh(dialect).await;
    let wf = Workflow::<St>::new::<Go>("brittle")
        .step("first", |ctx: Ctx<St>, _: Go| async move {
            ctx.write_stream(&Note {
                text: "first".into(),
            })?;
            ctx.send(Hop { i: 1 })
        })
        .step("boom", |ctx: Ctx<St>, _: Hop| async move {
            if ctx.run_id().is_empty() {
                return ctx.stop(&Out { attempts: 0 });
            }
            panic!("a bug in a step that runs after a quick one")
        })
        .build();
    let config = EngineConfig {
        lease_ttl: Duration::from_secs(1),
        chain_wait: Duration::from_secs(10),
        ..config("brittle", Duration::from_millis(25))
    };
    let e = engine_with(&db, config, [wf]);
    let (stop, worker) = run_worker(&e);
    let run = e
        .start("brittle", json!({}), StartOptions::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let texts = loop {
        let events = db.store.events_after(&run.id, -1, 10).await.unwrap();
        if !events.is_empty() {
            break events
                .iter()
                .map(|e| e.envelope.value["text"].clone())
                .collect::<Vec<_>>();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the step before the panicking one never committed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(texts, [json!("first")]);
    stop.send(true).unwrap();
    worker.await.unwrap();
}

both!(
    a_reader_of_a_run_driven_here_reads_nothing_back,
    a_chained_step_that_panics_lets_the_steps_before_it_commit,
    quick_steps_share_a_commit_and_a_call_stores_its_event_first,
    runs_started_or_approved_here_share_the_slots_with_claimed_ones,
    a_step_that_panics_gives_its_slot_back,
    an_approval_sent_before_a_run_started_here_first_parks_is_taken_up,
    an_approval_sent_between_the_plan_event_and_the_wait_is_taken_up,
    a_busy_worker_still_takes_over_a_run_whose_holder_died,
    an_approval_landing_as_the_run_parks_is_taken_up_without_polling,
    a_run_stored_by_an_older_version_is_upgraded,
    approval_survives_restart_and_rejection_replans,
    a_reader_follows_a_run_another_process_drives,
    early_approval_and_bad_events,
    cancel_a_waiting_run,
    retries_timeouts_and_deadlines,
    journaled_calls_stream_with_their_results
);
