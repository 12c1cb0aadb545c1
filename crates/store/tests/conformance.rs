//! The storage conformance suite: every case runs against SQLite and Postgres.

use std::sync::Arc;

use fathom_data::*;
use fathom_engine::store::*;
use fathom_engine::{Envelope, StopEvent, WorkflowCancelledEvent};
use fathom_store::{Dialect, SqlStore};
use fathom_testkit::db::fresh;
use serde_json::{Value, json};

macro_rules! both {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { let db = super::fresh(super::Dialect::Sqlite).await; super::$case(db.store.clone()).await; })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { let db = super::fresh(super::Dialect::Postgres).await; super::$case(db.store.clone()).await; })*
        }
    };
}

both!(
    step_commit_is_atomic_and_numbers_events,
    commit_hands_out_sent_ids_and_moves_the_head,
    stale_fence_is_refused_and_applies_nothing,
    journal_keeps_first_result,
    upgrade_rewrites_a_runs_rows_under_its_lease,
    mailbox_keeps_early_events_dedupes_and_supersedes,
    a_second_decision_is_refused_and_a_stale_one_too,
    a_decision_for_a_wait_that_is_over_is_refused_though_the_run_waits_again,
    suspend_cannot_miss_a_message,
    a_step_commit_parks_the_run_unless_mail_arrived,
    a_run_is_created_or_woken_under_its_starters_lease,
    cancel_streams_event_and_fences_out_owner,
    restarted_owner_takes_runs_back,
    concurrent_claimers_never_share_a_run,
    a_batch_claim_takes_at_most_its_limit_oldest_first,
    collections_crud_search_and_pages,
    collections_aggregate,
    replace_where_is_idempotent,
    a_final_item_is_not_replaced,
    set_field_writes_one_field_in_one_write,
    a_snapshot_keeps_the_fields_its_item_carries,
    artifacts_are_content_addressed,
    deleting_a_run_deletes_its_rows_those_of_a_commit_holding_it_too,
);

fn env(n: i64) -> Envelope {
    Envelope {
        value: json!({"n": n}),
        qualified_name: None,
        event_type: "Tick".into(),
        types: None,
    }
}

async fn new_run(s: &SqlStore, id: &str) -> RunRecord {
    s.create_run(NewRun {
        id: id.into(),
        workflow: "wf".into(),
        state: json!({"count": 0}),
        start_type: "Start".into(),
        start_payload: json!({"q": "hello"}),
        deadline_at: None,
        format: 2,
    })
    .await
    .unwrap()
}

/// A commit returns the ids of the events it sent, in order, as the inbox lists them; a
/// stored envelope reads back whole; a run that moved shows in `changed_since` with its new
/// head, and nothing shows as changed after now.
async fn commit_hands_out_sent_ids_and_moves_the_head(s: SqlStore) {
    new_run(&s, "r1").await;
    let since = now_ms();
    let (_, lease) = s.claim_run("r1", "w1", 10_000).await.unwrap().unwrap();
    let start = next_pending(&s, "r1").await.unwrap();
    // Text that must come back byte for byte: control characters (the record separator
    // among them), quotes, escapes, non-ASCII, an empty string.
    let awkward = "rs \u{1e} us \u{1f} nul-free \u{1} quote \" escape \\u0001 é ∑ 🦀";
    let mut shown = env(0);
    shown.value = json!({"text": awkward, "empty": ""});
    let mut c = commit(start.id, vec![shown.clone(), env(1)], StepOutcome::Continue);
    c.sent = vec![("Bad\u{1e}Type".into(), json!({}))];
    assert!(
        matches!(s.commit_step(&lease, &c).await, Err(StoreError::Invalid(_))),
        "an event type with a control character is refused"
    );
    c.sent = (0..3)
        .map(|i| (format!("Fan{i}"), json!({"i": i, "text": awkward})))
        .collect();
    let done = s.commit_step(&lease, &c).await.unwrap();
    assert_eq!(done.seqs, vec![0, 1], "the refused commit wrote nothing");
    let pending = s.pending_events("r1", 10).await.unwrap();
    assert_eq!(
        pending.iter().map(|p| p.id).collect::<Vec<_>>(),
        done.sent_ids,
        "the sent events, oldest first"
    );
    assert_eq!(
        pending
            .iter()
            .map(|p| p.event_type.as_str())
            .collect::<Vec<_>>(),
        vec!["Fan0", "Fan1", "Fan2"]
    );
    assert_eq!(pending[1].payload, c.sent[1].1);
    let events = s.events_after("r1", -1, 10).await.unwrap();
    assert_eq!(events[0].envelope, shown);
    assert_eq!(events[1].envelope, env(1));
    let heads = s.changed_since(since, 100).await.unwrap();
    let moved: Vec<&RunHead> = heads.iter().filter(|h| h.id == "r1").collect();
    assert_eq!(moved.len(), 1);
    assert_eq!(
        (moved[0].next_seq, moved[0].status),
        (2, RunStatus::Running)
    );
    assert!(
        s.changed_since(now_ms() + 60_000, 100)
            .await
            .unwrap()
            .is_empty(),
        "nothing changed in the future"
    );
}

/// Run `r1`, held under `lease`, looks at its mailbox and parks waiting for `event_type`.
async fn park(s: &SqlStore, lease: &Lease, event_type: &str) {
    let view = s.mailbox_peek("r1", event_type).await.unwrap();
    assert_eq!(
        s.suspend(lease, event_type, view.mailbox_seq)
            .await
            .unwrap(),
        SuspendOutcome::Suspended
    );
}

/// The oldest pending step event of a run.
async fn next_pending(s: &SqlStore, id: &str) -> Option<PendingEvent> {
    s.pending_events(id, 1).await.unwrap().into_iter().next()
}

fn commit(consumed: i64, stream: Vec<Envelope>, outcome: StepOutcome) -> StepCommit {
    StepCommit {
        consumed: Some(consumed),
        step: "s".into(),
        attempt: 1,
        started_at: now_ms(),
        state: Some(json!({"count": 1})),
        stream,
        sent: vec![("Next".into(), json!({"k": 1}))],
        mailbox_consumed: vec![],
        outcome,
        chained: vec![],
        park: None,
    }
}

async fn step_commit_is_atomic_and_numbers_events(s: SqlStore) {
    new_run(&s, "r1").await;
    assert!(matches!(
        s.create_run(NewRun {
            id: "r1".into(),
            workflow: "wf".into(),
            state: json!({}),
            start_type: "Start".into(),
            start_payload: json!({}),
            deadline_at: None,
            format: 1,
        })
        .await,
        Err(StoreError::Conflict(_))
    ));
    let (_, lease) = s
        .claim_next("w1", 10_000, &[])
        .await
        .unwrap()
        .expect("claimable");
    assert!(
        s.claim_next("w2", 10_000, &[]).await.unwrap().is_none(),
        "leased run claimed twice"
    );
    let start = next_pending(&s, "r1").await.unwrap();
    assert_eq!(start.event_type, "Start");
    assert_eq!(start.payload, json!({"q": "hello"}));
    let seqs = s
        .commit_step(
            &lease,
            &commit(start.id, vec![env(0), env(1)], StepOutcome::Continue),
        )
        .await
        .unwrap();
    assert_eq!(seqs.seqs, vec![0, 1]);
    let run = s.get_run("r1").await.unwrap().unwrap();
    assert_eq!(run.state, json!({"count": 1}));
    assert_eq!(run.next_seq, 2);
    let next = next_pending(&s, "r1").await.unwrap();
    assert_eq!(next.event_type, "Next");
    // Committing the same input twice is refused whole: no events are added.
    let again = s
        .commit_step(
            &lease,
            &commit(start.id, vec![env(9)], StepOutcome::Continue),
        )
        .await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    assert_eq!(s.events_after("r1", -1, 100).await.unwrap().len(), 2);
    let stop = Envelope::of(&StopEvent {
        result: json!("done"),
    })
    .unwrap();
    let seqs = s
        .commit_step(
            &lease,
            &commit(next.id, vec![env(2)], StepOutcome::Completed(stop.clone())),
        )
        .await
        .unwrap();
    assert_eq!(seqs.seqs, vec![2, 3]);
    let run = s.get_run("r1").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.result, Some(stop));
    let events = s.events_after("r1", 0, 100).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(events.last().unwrap().envelope.is_stop());
    assert!(
        s.claim_next("w1", 10_000, &[]).await.unwrap().is_none(),
        "completed run claimable"
    );
}

async fn stale_fence_is_refused_and_applies_nothing(s: SqlStore) {
    new_run(&s, "r1").await;
    let (_, old) = s.claim_next("w1", 1, &[]).await.unwrap().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let (_, new) = s
        .claim_next("w2", 10_000, &[])
        .await
        .unwrap()
        .expect("expired lease is claimable");
    assert!(new.fence > old.fence);
    let start = next_pending(&s, "r1").await.unwrap();
    let r = s
        .commit_step(&old, &commit(start.id, vec![env(0)], StepOutcome::Continue))
        .await;
    assert!(matches!(r, Err(StoreError::LeaseLost(_))), "{r:?}");
    assert!(matches!(
        s.journal_put(&old, start.id, "k", &json!(1), &[env(9)])
            .await,
        Err(StoreError::LeaseLost(_))
    ));
    assert!(!s.renew_lease(&old, 10_000).await.unwrap());
    assert!(s.events_after("r1", -1, 10).await.unwrap().is_empty());
    assert_eq!(
        s.get_run("r1").await.unwrap().unwrap().state,
        json!({"count": 0})
    );
    assert!(
        next_pending(&s, "r1").await.is_some(),
        "refused commit consumed its input"
    );
    s.commit_step(&new, &commit(start.id, vec![env(0)], StepOutcome::Continue))
        .await
        .unwrap();
}

async fn journal_keeps_first_result(s: SqlStore) {
    new_run(&s, "r1").await;
    let (_, lease) = s.claim_next("w1", 10_000, &[]).await.unwrap().unwrap();
    assert_eq!(s.journal_get("r1", 1, "llm").await.unwrap(), None);
    assert_eq!(
        s.journal_put(&lease, 1, "llm", &json!({"a": 1}), &[env(0), env(1)])
            .await
            .unwrap(),
        (json!({"a": 1}), Some(1))
    );
    // The losing put keeps the first result and writes none of its events.
    assert_eq!(
        s.journal_put(&lease, 1, "llm", &json!({"a": 2}), &[env(2)])
            .await
            .unwrap(),
        (json!({"a": 1}), None)
    );
    // Events of a journaled call are numbered with the step's own, without a gap.
    let start = next_pending(&s, "r1").await.unwrap();
    let seqs = s
        .commit_step(
            &lease,
            &commit(start.id, vec![env(3)], StepOutcome::Continue),
        )
        .await
        .unwrap();
    assert_eq!(seqs.seqs, vec![2]);
    let got: Vec<i64> = s
        .events_after("r1", -1, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(got, vec![0, 1, 2]);
    assert_eq!(
        s.journal_get("r1", 1, "llm").await.unwrap(),
        Some(json!({"a": 1}))
    );
    assert_eq!(
        s.journal_get("r1", 2, "llm").await.unwrap(),
        None,
        "keys are scoped per step invocation"
    );
}

/// A run keeps the format it was created with; an upgrade rewrites its state, pending step
/// events and the journaled results asked for, and records the new format, all at once and
/// only under a live lease.
async fn upgrade_rewrites_a_runs_rows_under_its_lease(s: SqlStore) {
    let run = new_run(&s, "r1").await;
    assert_eq!(run.format, 2);
    let (claimed, lease) = s.claim_next("w1", 10_000, &[]).await.unwrap().unwrap();
    assert_eq!(claimed.format, 2);
    let start = next_pending(&s, "r1").await.unwrap();
    s.journal_put(&lease, start.id, "search", &json!({"hits": 1}), &[])
        .await
        .unwrap();
    s.journal_put(&lease, start.id + 100, "other", &json!({"old": true}), &[])
        .await
        .unwrap();
    assert_eq!(
        s.journal_entries("r1", &[start.id]).await.unwrap(),
        vec![(start.id, "search".to_string(), json!({"hits": 1}))]
    );
    let upgrade = RunUpgrade {
        format: 3,
        state: json!({"total": 0}),
        inbox: vec![(start.id, json!({"question": "hello"}))],
        journal: vec![(start.id, "search".into(), json!({"hits": [1]}))],
    };
    let stale = Lease {
        fence: lease.fence - 1,
        ..lease.clone()
    };
    assert!(matches!(
        s.upgrade_run(&stale, &upgrade).await,
        Err(StoreError::LeaseLost(_))
    ));
    assert_eq!(
        s.get_run("r1").await.unwrap().unwrap().format,
        2,
        "nothing applied"
    );
    s.upgrade_run(&lease, &upgrade).await.unwrap();
    let run = s.get_run("r1").await.unwrap().unwrap();
    assert_eq!((run.format, run.state), (3, json!({"total": 0})));
    assert_eq!(
        next_pending(&s, "r1").await.unwrap().payload,
        json!({"question": "hello"})
    );
    assert_eq!(
        s.journal_get("r1", start.id, "search").await.unwrap(),
        Some(json!({"hits": [1]}))
    );
    assert_eq!(
        s.journal_get("r1", start.id + 100, "other").await.unwrap(),
        Some(json!({"old": true})),
        "rows not named are left alone"
    );
}

async fn mailbox_keeps_early_events_dedupes_and_supersedes(s: SqlStore) {
    new_run(&s, "r1").await;
    let msg = |v: Value, key: Option<&str>| NewMessage {
        event_type: "Approve".into(),
        payload: v,
        idempotency_key: key.map(Into::into),
        ..Default::default()
    };
    // Early: the run is not waiting yet.
    let a = s
        .deliver("r1", msg(json!({"ok": true}), Some("k1")))
        .await
        .unwrap();
    let DeliverOutcome::Accepted { message_id: first } = a else {
        panic!("{a:?}")
    };
    assert_eq!(
        s.deliver("r1", msg(json!({"ok": true}), Some("k1")))
            .await
            .unwrap(),
        DeliverOutcome::Duplicate { message_id: first }
    );
    let b = s
        .deliver("r1", msg(json!({"ok": false}), Some("k2")))
        .await
        .unwrap();
    assert!(matches!(b, DeliverOutcome::Accepted { .. }));
    assert_eq!(
        s.deliver("nope", msg(json!({}), None)).await.unwrap(),
        DeliverOutcome::RunNotFound
    );
    let view = s.mailbox_peek("r1", "Approve").await.unwrap();
    assert_eq!(
        view.message,
        Some((first, json!({"ok": true}))),
        "oldest first"
    );
    let (_, lease) = s.claim_next("w1", 10_000, &[]).await.unwrap().unwrap();
    let start = next_pending(&s, "r1").await.unwrap();
    let mut c = commit(start.id, vec![], StepOutcome::Continue);
    c.mailbox_consumed = vec![first];
    s.commit_step(&lease, &c).await.unwrap();
    // The conflicting decision was superseded: exactly one applied.
    assert_eq!(s.mailbox_peek("r1", "Approve").await.unwrap().message, None);
    // Consuming a message that is no longer pending is refused whole.
    let next = next_pending(&s, "r1").await.unwrap();
    let mut again = commit(next.id, vec![env(5)], StepOutcome::Continue);
    again.mailbox_consumed = vec![first];
    let refused = s.commit_step(&lease, &again).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert!(s.events_after("r1", -1, 100).await.unwrap().is_empty());
    assert_eq!(next_pending(&s, "r1").await.unwrap().id, next.id);
    let stop = Envelope::of(&StopEvent {
        result: json!(null),
    })
    .unwrap();
    let next = next_pending(&s, "r1").await.unwrap();
    s.commit_step(
        &lease,
        &commit(next.id, vec![], StepOutcome::Completed(stop)),
    )
    .await
    .unwrap();
    assert_eq!(
        s.deliver("r1", msg(json!({}), None)).await.unwrap(),
        DeliverOutcome::RunTerminal(RunStatus::Completed)
    );
}

async fn a_second_decision_is_refused_and_a_stale_one_too(s: SqlStore) {
    new_run(&s, "r1").await;
    let decision = |v: Value, key: &str, at_seq: Option<i64>| NewMessage {
        event_type: "Approve".into(),
        payload: v,
        idempotency_key: Some(key.into()),
        exclusive: true,
        at_seq,
    };
    // The run parks for a decision.
    let (_, lease) = s.claim_next("w1", 10_000, &[]).await.unwrap().unwrap();
    park(&s, &lease, "Approve").await;
    let run = s.get_run("r1").await.unwrap().unwrap();
    // What a sender decides by, read without the run's state: the same as the whole record.
    let head = s.run_head("r1").await.unwrap().unwrap();
    assert_eq!(head, run.head());
    assert_eq!(head.waiting_for.as_deref(), Some("Approve"));
    let first = s
        .deliver("r1", decision(json!({"ok": true}), "a", Some(run.next_seq)))
        .await
        .unwrap();
    let DeliverOutcome::Accepted { message_id } = first else {
        panic!("{first:?}")
    };
    // The same delivery again is a duplicate, not a conflict.
    assert_eq!(
        s.deliver("r1", decision(json!({"ok": true}), "a", Some(run.next_seq)))
            .await
            .unwrap(),
        DeliverOutcome::Duplicate { message_id }
    );
    // Another decision while the first waits to be taken up is refused, and not stored.
    for (key, at_seq) in [("b", None), ("b2", Some(run.next_seq))] {
        let second = s
            .deliver("r1", decision(json!({"ok": false}), key, at_seq))
            .await;
        assert!(matches!(second, Err(StoreError::Conflict(_))), "{second:?}");
    }
    // Taken up by a commit that streams nothing (a rejection going straight back to
    // planning): the wait it was for is over though the stream has not moved, so a decision
    // sent for it is refused.
    let (_, lease) = s.claim_next("w1", 10_000, &[]).await.unwrap().unwrap();
    let start = next_pending(&s, "r1").await.unwrap();
    let mut c = commit(start.id, vec![], StepOutcome::Continue);
    c.mailbox_consumed = vec![message_id];
    s.commit_step(&lease, &c).await.unwrap();
    assert_eq!(
        s.get_run("r1").await.unwrap().unwrap().next_seq,
        run.next_seq
    );
    let late = s
        .deliver(
            "r1",
            decision(json!({"ok": false}), "c", Some(run.next_seq)),
        )
        .await;
    assert!(matches!(late, Err(StoreError::Conflict(_))), "{late:?}");
    // Sent with no position while the run waits for nothing, after one was taken up: it
    // can only be for a later wait, and is not stored.
    assert_eq!(
        s.deliver("r1", decision(json!({"ok": false}), "d", None))
            .await
            .unwrap(),
        DeliverOutcome::BetweenWaits
    );
    // The run streams and parks again: a decision for the old position is refused, one for
    // the new position is taken.
    let next = next_pending(&s, "r1").await.unwrap();
    s.commit_step(
        &lease,
        &commit(next.id, vec![env(1)], StepOutcome::Continue),
    )
    .await
    .unwrap();
    park(&s, &lease, "Approve").await;
    let moved = s.get_run("r1").await.unwrap().unwrap();
    assert!(moved.next_seq > run.next_seq);
    let stale = s
        .deliver(
            "r1",
            decision(json!({"ok": false}), "e", Some(run.next_seq)),
        )
        .await;
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    let current = s
        .deliver(
            "r1",
            decision(json!({"ok": false}), "c", Some(moved.next_seq)),
        )
        .await
        .unwrap();
    assert!(
        matches!(current, DeliverOutcome::Accepted { .. }),
        "{current:?}"
    );
    let pending: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM mailbox WHERE run_id = 'r1' AND status = 'pending'",
    )
    .fetch_one(s.pool())
    .await
    .unwrap();
    assert_eq!(pending, 1, "only the decision taken is kept");
}

/// A decision taken up without streaming, after which the run waits for something else at
/// the same stream position: a decision sent for the first wait is refused as late, at once.
async fn a_decision_for_a_wait_that_is_over_is_refused_though_the_run_waits_again(s: SqlStore) {
    new_run(&s, "r1").await;
    let decision = |key: &str, at_seq: i64| NewMessage {
        event_type: "Approve".into(),
        payload: json!({"ok": true}),
        idempotency_key: Some(key.into()),
        exclusive: true,
        at_seq: Some(at_seq),
    };
    let (_, lease) = s.claim_next("w1", 10_000, &[]).await.unwrap().unwrap();
    park(&s, &lease, "Approve").await;
    let at = s.get_run("r1").await.unwrap().unwrap().next_seq;
    let DeliverOutcome::Accepted { message_id } = s.deliver("r1", decision("a", at)).await.unwrap()
    else {
        panic!("the first decision is taken")
    };
    let (_, lease) = s.claim_next("w1", 10_000, &[]).await.unwrap().unwrap();
    let start = next_pending(&s, "r1").await.unwrap();
    let mut c = commit(start.id, vec![], StepOutcome::Continue);
    c.mailbox_consumed = vec![message_id];
    s.commit_step(&lease, &c).await.unwrap();
    park(&s, &lease, "Other").await;
    let run = s.get_run("r1").await.unwrap().unwrap();
    assert_eq!(
        (run.status, run.next_seq, run.waiting_for.as_deref()),
        (RunStatus::Waiting, at, Some("Other"))
    );
    match s.deliver("r1", decision("b", at)).await {
        Err(StoreError::Conflict(why)) => assert!(why.contains("moved on"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A step commit that parks the run (the engine's chained steps, the last of which waits)
/// applies whole and parks it as `suspend` would; when a message arrived since the step
/// looked, it applies whole and leaves the run running under the lease, to look again.
async fn a_step_commit_parks_the_run_unless_mail_arrived(s: SqlStore) {
    new_run(&s, "r1").await;
    let (_, lease) = s.claim_run("r1", "w1", 10_000).await.unwrap().unwrap();
    let start = next_pending(&s, "r1").await.unwrap();
    let view = s.mailbox_peek("r1", "Approve").await.unwrap();
    // A message lands between the look and the commit.
    let other = NewMessage {
        event_type: "Other".into(),
        payload: json!({}),
        ..Default::default()
    };
    s.deliver("r1", other.clone()).await.unwrap();
    let mut c = commit(start.id, vec![env(0)], StepOutcome::Continue);
    c.park = Some(("Approve".into(), view.mailbox_seq));
    let done = s.commit_step(&lease, &c).await.unwrap();
    assert!(!done.parked, "mail arrived: the run stays running");
    let run = s.get_run("r1").await.unwrap().unwrap();
    assert_eq!((run.status, run.next_seq), (RunStatus::Running, 1));
    assert_eq!(next_pending(&s, "r1").await.unwrap().id, done.sent_ids[0]);
    // It looks again and commits the next step, parking this time.
    let view = s.mailbox_peek("r1", "Approve").await.unwrap();
    let mut c = commit(done.sent_ids[0], vec![env(1)], StepOutcome::Continue);
    c.park = Some(("Approve".into(), view.mailbox_seq));
    let done = s.commit_step(&lease, &c).await.unwrap();
    assert!(done.parked);
    let run = s.get_run("r1").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Waiting);
    assert_eq!(run.waiting_for.as_deref(), Some("Approve"));
    assert_eq!(run.next_seq, 2, "its events are committed");
    assert_eq!(
        next_pending(&s, "r1").await.unwrap().id,
        done.sent_ids[0],
        "the sent event waits for the step that runs when the run is woken"
    );
    assert!(
        s.claim_next("w2", 10_000, &[]).await.unwrap().is_none(),
        "a parked run is not claimable"
    );
    assert!(
        matches!(
            s.commit_step(&lease, &c).await,
            Err(StoreError::LeaseLost(_))
        ),
        "the lease went with the park"
    );
}

async fn suspend_cannot_miss_a_message(s: SqlStore) {
    new_run(&s, "r1").await;
    let (_, lease) = s.claim_next("w1", 10_000, &[]).await.unwrap().unwrap();
    let view = s.mailbox_peek("r1", "Approve").await.unwrap();
    assert!(view.message.is_none());
    // A message lands between the look and the suspend.
    s.deliver(
        "r1",
        NewMessage {
            event_type: "Approve".into(),
            payload: json!({}),
            idempotency_key: None,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        s.suspend(&lease, "Approve", view.mailbox_seq)
            .await
            .unwrap(),
        SuspendOutcome::MailArrived
    );
    // Now the mailbox is looked at again; take the message, then wait for a second one.
    let view = s.mailbox_peek("r1", "Other").await.unwrap();
    assert_eq!(
        s.suspend(&lease, "Other", view.mailbox_seq).await.unwrap(),
        SuspendOutcome::Suspended
    );
    let run = s.get_run("r1").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Waiting);
    assert_eq!(run.waiting_for.as_deref(), Some("Other"));
    assert!(
        s.claim_next("w1", 10_000, &[]).await.unwrap().is_none(),
        "waiting run is claimable"
    );
    // A message of another type does not wake it; the awaited one does.
    s.deliver(
        "r1",
        NewMessage {
            event_type: "Approve".into(),
            payload: json!({}),
            idempotency_key: None,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        s.get_run("r1").await.unwrap().unwrap().status,
        RunStatus::Waiting
    );
    s.deliver(
        "r1",
        NewMessage {
            event_type: "Other".into(),
            payload: json!({}),
            idempotency_key: None,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        s.get_run("r1").await.unwrap().unwrap().status,
        RunStatus::Running
    );
    assert!(
        s.claim_next("w2", 10_000, &[]).await.unwrap().is_some(),
        "woken run not claimable"
    );
}

/// Eager start and resume: a run created or woken by a process with a slot free comes back
/// already leased to it, with its pending step events, and no other claimer can take it. A
/// claiming delivery to a run not waiting for it writes nothing.
async fn a_run_is_created_or_woken_under_its_starters_lease(s: SqlStore) {
    let new = NewRun {
        id: "r1".into(),
        workflow: "wf".into(),
        state: json!({"count": 0}),
        start_type: "Start".into(),
        start_payload: json!({"q": "hello"}),
        deadline_at: None,
        format: 2,
    };
    let created = s.create_claimed(new.clone(), "w1", 10_000).await.unwrap();
    assert_eq!(
        (created.lease.owner.as_str(), created.lease.fence),
        ("w1", 1)
    );
    assert_eq!(created.run.status, RunStatus::Running);
    let start = &created
        .pending
        .as_ref()
        .expect("the start event comes along")[0];
    assert_eq!(start.event_type, "Start");
    assert_eq!(start.payload, json!({"q": "hello"}));
    assert_eq!(next_pending(&s, "r1").await.unwrap().id, start.id);
    assert!(
        s.claim_next("w2", 10_000, &[]).await.unwrap().is_none(),
        "a run created under a lease is claimable by others"
    );
    assert!(matches!(
        s.create_claimed(new, "w2", 10_000).await,
        Err(StoreError::Conflict(_))
    ));

    // Its first step runs under that lease, then it parks for an Approve.
    let lease = created.lease;
    s.commit_step(
        &lease,
        &commit(start.id, vec![env(0)], StepOutcome::Continue),
    )
    .await
    .unwrap();
    park(&s, &lease, "Approve").await;

    let message = |event_type: &str| NewMessage {
        event_type: event_type.into(),
        payload: json!({"ok": true}),
        idempotency_key: Some(format!("key-{event_type}")),
        ..Default::default()
    };
    assert!(
        s.deliver_claiming("r1", &message("Other"), "w2", 10_000)
            .await
            .unwrap()
            .is_none(),
        "a message the run does not wait for is left to the ordinary delivery"
    );
    assert!(
        s.mailbox_peek("r1", "Other")
            .await
            .unwrap()
            .message
            .is_none(),
        "and nothing was stored"
    );
    assert_eq!(
        s.get_run("r1").await.unwrap().unwrap().status,
        RunStatus::Waiting
    );

    let (message_id, woken) = s
        .deliver_claiming("r1", &message("Approve"), "w2", 10_000)
        .await
        .unwrap()
        .expect("the awaited message wakes and claims the run");
    assert_eq!((woken.lease.owner.as_str(), woken.lease.fence), ("w2", 2));
    assert_eq!(woken.run.status, RunStatus::Running);
    assert_eq!(woken.run.waiting_for, None);
    assert_eq!(woken.run.state, json!({"count": 1}));
    let pending: Vec<&str> = woken
        .pending
        .as_ref()
        .expect("its inbox comes along")
        .iter()
        .map(|p| p.event_type.as_str())
        .collect();
    assert_eq!(pending, vec!["Next"], "the step event the commit sent");
    assert_eq!(
        s.mailbox_peek("r1", "Approve").await.unwrap().message,
        Some((message_id, json!({"ok": true})))
    );
    assert!(
        !s.renew_lease(&lease, 10_000).await.unwrap(),
        "the lease it parked under is gone"
    );
    assert!(s.claim_next("w3", 10_000, &[]).await.unwrap().is_none());

    // The same message again is not taken twice: the ordinary delivery calls it a duplicate.
    assert!(
        s.deliver_claiming("r1", &message("Approve"), "w3", 10_000)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        s.deliver("r1", message("Approve")).await.unwrap(),
        DeliverOutcome::Duplicate { message_id }
    );
}

async fn cancel_streams_event_and_fences_out_owner(s: SqlStore) {
    new_run(&s, "r1").await;
    let (_, lease) = s.claim_next("w1", 10_000, &[]).await.unwrap().unwrap();
    let start = next_pending(&s, "r1").await.unwrap();
    s.commit_step(
        &lease,
        &commit(start.id, vec![env(0)], StepOutcome::Continue),
    )
    .await
    .unwrap();
    let cancelled = Envelope::of(&WorkflowCancelledEvent {}).unwrap();
    assert_eq!(
        s.cancel_run("r1", cancelled.clone()).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        s.cancel_run("r1", cancelled.clone()).await.unwrap(),
        CancelOutcome::AlreadyTerminal(RunStatus::Cancelled)
    );
    assert_eq!(
        s.cancel_run("zz", cancelled).await.unwrap(),
        CancelOutcome::NotFound
    );
    let next = next_pending(&s, "r1").await.unwrap();
    assert!(matches!(
        s.commit_step(
            &lease,
            &commit(next.id, vec![env(1)], StepOutcome::Continue)
        )
        .await,
        Err(StoreError::LeaseLost(_))
    ));
    let events = s.events_after("r1", -1, 10).await.unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(events[1].envelope.event_type, "WorkflowCancelledEvent");
    assert!(events[1].envelope.is_stop());
    assert!(s.delete_run("r1").await.unwrap());
    assert!(s.get_run("r1").await.unwrap().is_none());
    assert!(s.events_after("r1", -1, 10).await.unwrap().is_empty());
}

async fn restarted_owner_takes_runs_back(s: SqlStore) {
    new_run(&s, "r1").await;
    new_run(&s, "r2").await;
    let (_, old) = s
        .claim_next("worker-a", 60_000, &[])
        .await
        .unwrap()
        .unwrap();
    let (_, _) = s
        .claim_next("worker-a", 60_000, std::slice::from_ref(&old.run_id))
        .await
        .unwrap()
        .unwrap();
    assert!(
        s.claim_next("worker-b", 60_000, &[])
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(s.release_owner("worker-a").await.unwrap(), 2);
    let (_, new) = s
        .claim_run(&old.run_id, "worker-a", 60_000)
        .await
        .unwrap()
        .expect("taken back");
    assert!(
        new.fence > old.fence,
        "restart must fence out the old incarnation"
    );
    assert!(!s.renew_lease(&old, 1000).await.unwrap());
}

async fn concurrent_claimers_never_share_a_run(s: SqlStore) {
    for i in 0..40 {
        new_run(&s, &format!("r{i:02}")).await;
    }
    let s = Arc::new(s);
    let mut tasks = Vec::new();
    for w in 0..4 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some((run, _)) = s.claim_next(&format!("w{w}"), 60_000, &[]).await.unwrap() {
                mine.push(run.id);
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    let n = all.len();
    all.dedup();
    assert_eq!(n, 40, "every run claimed once");
    assert_eq!(all.len(), 40, "a run was claimed twice");
}

fn scope() -> CollectionScope {
    CollectionScope {
        deployment_name: "_public".into(),
        collection: "people".into(),
    }
}

async fn add(s: &SqlStore, data: Value) -> Item {
    s.create_item(NewItem {
        deployment_name: "_public".into(),
        collection: "people".into(),
        data,
        project_id: None,
    })
    .await
    .unwrap()
}

async fn search(s: &SqlStore, filter: Value, order: &str) -> Vec<String> {
    let page = s
        .search(&SearchQuery {
            scope: scope(),
            filter: Filter::parse(&filter).unwrap(),
            order_by: OrderBy::parse_list(order).unwrap(),
            offset: 0,
            page_size: 100,
            include_total: false,
        })
        .await
        .unwrap();
    page.items
        .iter()
        .map(|i| i.data["name"].as_str().unwrap().to_string())
        .collect()
}

async fn collections_crud_search_and_pages(s: SqlStore) {
    let ann = add(
        &s,
        json!({"name": "ann", "age": 31, "tags": ["python", "ml"], "team": "a", "score": 55.5}),
    )
    .await;
    add(
        &s,
        json!({"name": "bob", "age": 17, "tags": ["rust"], "team": "b", "score": 99}),
    )
    .await;
    add(&s, json!({"name": "cid", "age": 45, "tags": [], "team": "a", "score": null, "nested": {"x": 1}})).await;
    add(
        &s,
        json!({"name": "dee", "age": "unknown", "team": "c", "active": true}),
    )
    .await;
    s.create_item(NewItem {
        deployment_name: "other".into(),
        collection: "people".into(),
        data: json!({"name": "zed"}),
        project_id: None,
    })
    .await
    .unwrap();

    assert_eq!(s.get_item(&ann.id).await.unwrap().unwrap().data["age"], 31);
    assert_eq!(
        search(&s, json!(null), "").await,
        ["ann", "bob", "cid", "dee"]
    );
    assert_eq!(
        search(&s, json!({"age": {"gt": 18}}), "data.age").await,
        ["ann", "cid"]
    );
    assert_eq!(
        search(
            &s,
            json!({"score": {"lt": 100, "gte": 50}}),
            "data.name desc"
        )
        .await,
        ["bob", "ann"]
    );
    assert_eq!(
        search(&s, json!({"name": {"gte": "bob", "lt": "d"}}), "").await,
        ["bob", "cid"]
    );
    assert_eq!(
        search(&s, json!({"tags": {"includes": ["python", "rust"]}}), "").await,
        ["ann", "bob"]
    );
    assert_eq!(
        search(&s, json!({"team": {"includes": ["a", "c"]}}), "").await,
        ["ann", "cid", "dee"]
    );
    assert_eq!(
        search(&s, json!({"team": {"excludes": ["a"]}}), "").await,
        ["bob", "dee"]
    );
    assert_eq!(
        search(&s, json!({"score": {"eq": null}}), "").await,
        ["cid", "dee"]
    );
    assert_eq!(
        search(&s, json!({"active": {"eq": true}}), "").await,
        ["dee"]
    );
    assert_eq!(
        search(&s, json!({"nested.x": {"eq": 1}}), "").await,
        ["cid"]
    );
    assert_eq!(
        search(&s, json!({"name": {"ne": "ann"}, "team": {"eq": "a"}}), "").await,
        ["cid"]
    );
    assert_eq!(
        search(
            &s,
            json!({"created_at": {"gte": "2000-01-01"}}),
            "data.name desc"
        )
        .await,
        ["dee", "cid", "bob", "ann"]
    );
    assert!(
        search(
            &s,
            json!({"created_at": {"lt": "2000-01-01T00:00:00Z"}}),
            ""
        )
        .await
        .is_empty()
    );

    // Pages: cursor by offset, with totals.
    let mut q = SearchQuery {
        scope: scope(),
        filter: Filter::default(),
        order_by: OrderBy::parse_list("data.name").unwrap(),
        offset: 0,
        page_size: 3,
        include_total: true,
    };
    let p1 = s.search(&q).await.unwrap();
    assert_eq!(p1.items.len(), 3);
    assert_eq!(p1.total, Some(4));
    assert_eq!(p1.next_offset, Some(3));
    q.offset = 3;
    let p2 = s.search(&q).await.unwrap();
    assert_eq!(p2.items.len(), 1);
    assert_eq!(p2.items[0].data["name"], "dee");
    assert_eq!(p2.next_offset, None);

    let updated = s
        .update_item(&ann.id, json!({"name": "ann", "age": 32}))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(updated.data, json!({"name": "ann", "age": 32}));
    assert!(updated.updated_at >= ann.updated_at);
    assert!(s.update_item("missing", json!({})).await.unwrap().is_none());
    assert!(s.delete_item(&ann.id).await.unwrap());
    assert!(!s.delete_item(&ann.id).await.unwrap());
    assert_eq!(
        s.delete_where(
            &scope(),
            &Filter::parse(&json!({"team": {"eq": "a"}})).unwrap()
        )
        .await
        .unwrap(),
        1
    );
    assert_eq!(search(&s, json!(null), "").await, ["bob", "dee"]);
}

async fn collections_aggregate(s: SqlStore) {
    let q = |group_by: Vec<&str>| AggregateQuery {
        scope: scope(),
        filter: Filter::default(),
        order_by: OrderBy::parse_list("data.name desc").unwrap(),
        group_by: group_by
            .into_iter()
            .map(|g| OrderBy::parse_group_field(g).unwrap())
            .collect(),
        count: true,
        first: true,
        offset: 0,
        page_size: 10,
    };
    let empty = s.aggregate(&q(vec![])).await.unwrap();
    assert_eq!(empty.groups.len(), 1);
    assert_eq!(empty.groups[0].count, Some(0));
    for (name, team) in [("ann", "a"), ("bob", "b"), ("cid", "a"), ("dee", "a")] {
        add(&s, json!({"name": name, "team": team})).await;
    }
    add(&s, json!({"name": "eve"})).await;
    let all = s.aggregate(&q(vec![])).await.unwrap();
    assert_eq!(all.groups[0].count, Some(5));
    let by_team = s.aggregate(&q(vec!["data.team"])).await.unwrap();
    let summary: Vec<(Value, i64, Value)> = by_team
        .groups
        .iter()
        .map(|g| {
            (
                g.group_key["team"].clone(),
                g.count.unwrap(),
                g.first_item.as_ref().unwrap().data["name"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (json!("a"), 3, json!("dee")),
            (json!("b"), 1, json!("bob")),
            (Value::Null, 1, json!("eve"))
        ]
    );
    assert_eq!(by_team.total, 3);
}

async fn replace_where_is_idempotent(s: SqlStore) {
    let f = Filter::data_eq("research_id", "abc");
    let mut ids = Vec::new();
    for round in 0..3 {
        let items = s
            .replace_where(
                &scope(),
                &f,
                None,
                &[],
                vec![json!({"research_id": "abc", "round": round})],
            )
            .await
            .unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].data["round"], round);
        ids.push(items[0].id.clone());
    }
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "a record saved again keeps its item: {ids:?}"
    );
    s.replace_where(
        &scope(),
        &Filter::data_eq("research_id", "other"),
        None,
        &[],
        vec![json!({"research_id": "other"})],
    )
    .await
    .unwrap();
    let page = first_items(&s, f).await;
    assert_eq!(
        page.total,
        Some(1),
        "snapshot written three times left more than one item"
    );
    assert_eq!(page.items[0].data["round"], 2);
    assert_eq!(page.items[0].id, ids[0]);

    // First saves of one record at once (two steps of a run saving its new session, say)
    // leave one item, not one each.
    let f = Filter::data_eq("research_id", "together");
    let saves: Vec<_> = (0..8)
        .map(|n| {
            let (s, f) = (s.clone(), f.clone());
            tokio::spawn(async move {
                s.replace_where(
                    &scope(),
                    &f,
                    None,
                    &[],
                    vec![json!({"research_id": "together", "n": n})],
                )
                .await
                .unwrap()
            })
        })
        .collect();
    for save in saves {
        assert_eq!(save.await.unwrap().len(), 1);
    }
    let page = first_items(&s, f).await;
    assert_eq!(page.total, Some(1), "first saves at once: {:?}", page.items);
}

/// The first ten items of the test scope matching `filter`, with their total.
async fn first_items(s: &SqlStore, filter: Filter) -> SearchPage {
    s.search(&SearchQuery {
        scope: scope(),
        filter,
        order_by: vec![],
        offset: 0,
        page_size: 10,
        include_total: true,
    })
    .await
    .unwrap()
}

/// A session saved as cancelled stays so: a live save meets it and writes nothing, whether
/// it comes after the final save or was waiting on it while that save was not yet committed.
async fn a_final_item_is_not_replaced(s: SqlStore) {
    let f = Filter::data_eq("research_id", "r1");
    let keep = Filter(vec![Condition {
        field: Field::Data(vec!["status".into()]),
        op: Op::Includes,
        value: json!(["cancelled", "failed"]),
    }]);
    let save = |status: &'static str, keep: Option<Filter>| {
        let (s, f) = (s.clone(), f.clone());
        async move {
            s.replace_where(
                &scope(),
                &f,
                keep.as_ref(),
                &[],
                vec![json!({"research_id": "r1", "status": status})],
            )
            .await
            .unwrap()
        }
    };
    let stored = || async {
        let page = first_items(&s, f.clone()).await;
        assert_eq!(page.total, Some(1), "one session item");
        page.items[0].clone()
    };

    // A first save, and one after it, are written though `keep` is given.
    let first = save("planning", Some(keep.clone())).await;
    assert_eq!(first.len(), 1, "a first save is written");
    assert_eq!(save("running", Some(keep.clone())).await.len(), 1);
    assert_eq!(stored().await.data["status"], "running");
    // The stop is saved; a live save after it is refused and changes nothing.
    assert_eq!(save("cancelled", None).await.len(), 1);
    assert!(save("running", Some(keep.clone())).await.is_empty());
    let item = stored().await;
    assert_eq!(item.data["status"], "cancelled");
    assert_eq!(item.id, first[0].id, "the item kept its id");

    // The stop is written by a transaction not yet committed while a live save waits on it.
    save("running", None).await;
    let mut tx = s.pool().begin().await.unwrap();
    let sql = match s.dialect() {
        Dialect::Postgres => {
            "UPDATE collection_items SET data = jsonb_set(data, '{status}', '\"cancelled\"') \
             WHERE id = $1"
        }
        Dialect::Sqlite => {
            "UPDATE collection_items SET data = json_set(data, '$.status', 'cancelled') \
             WHERE id = ?"
        }
    };
    sqlx::query(sql)
        .bind(first[0].id.clone())
        .execute(&mut *tx)
        .await
        .unwrap();
    let late = tokio::spawn(save("running", Some(keep.clone())));
    // On SQLite writes take turns, so the live save lands after the commit whichever way
    // it is scheduled; on Postgres it is seen blocked on the row first.
    if s.dialect() == Dialect::Postgres {
        until_waiting_on_a_lock(&s, "%collection_items%", "the live save").await;
    }
    tx.commit().await.unwrap();
    assert!(late.await.unwrap().is_empty(), "the late live save wrote");
    assert_eq!(stored().await.data["status"], "cancelled");
}

/// One field of an item set in one write: the objects on its way made where missing or not
/// objects, the rest of the item kept, its time moved on. Writers of different fields of one
/// item at once each keep theirs.
async fn set_field_writes_one_field_in_one_write(s: SqlStore) {
    let item = add(&s, json!({"name": "ann", "exports": null, "tags": "x"})).await;
    let entry = json!({"file_id": "f1", "note": null, "ok": true, "text": "nul \u{0} here"});
    let set = s
        .set_field(&item.id, "exports.pdf", entry.clone())
        .await
        .unwrap()
        .expect("the item");
    assert_eq!(set.id, item.id);
    assert_eq!(
        set.data,
        json!({"name": "ann", "exports": {"pdf": entry}, "tags": "x"})
    );
    assert!(set.updated_at >= item.updated_at);
    s.set_field(&item.id, "exports.docx", json!("f2"))
        .await
        .unwrap();
    s.set_field(&item.id, "deep.a-b.c", json!([1, null]))
        .await
        .unwrap();
    s.set_field(&item.id, "tags.more", json!(false))
        .await
        .unwrap();
    s.set_field(&item.id, "name", json!("bea")).await.unwrap();
    let got = s.get_item(&item.id).await.unwrap().unwrap();
    assert_eq!(
        got.data,
        json!({"name": "bea", "exports": {"pdf": entry, "docx": "f2"},
               "deep": {"a-b": {"c": [1, null]}}, "tags": {"more": false}})
    );
    for bad in ["", "a..b", "a.b c", "x;drop"] {
        assert!(
            matches!(
                s.set_field(&item.id, bad, json!(1)).await,
                Err(StoreError::Invalid(_))
            ),
            "path '{bad}' accepted"
        );
    }
    assert!(
        s.set_field("missing", "x", json!(1))
            .await
            .unwrap()
            .is_none()
    );

    let writes: Vec<_> = (0..40)
        .map(|i| {
            let (s, id) = (s.clone(), item.id.clone());
            tokio::spawn(async move {
                s.set_field(&id, &format!("exports.f{i}"), json!(i))
                    .await
                    .unwrap()
                    .expect("the item")
            })
        })
        .collect();
    for w in writes {
        w.await.unwrap();
    }
    let exports = s.get_item(&item.id).await.unwrap().unwrap().data["exports"].clone();
    for i in 0..40 {
        assert_eq!(exports[format!("f{i}")], i, "f{i} lost: {exports}");
    }
    assert_eq!(exports["pdf"], entry);
}

/// A snapshot written with `carry` leaves the carried field as its item holds it when the
/// write lands: a record's own value for it is ignored, a first save has it null, and fields
/// set meanwhile, by writers racing the snapshots, all stay. Several items replaced at once
/// pass on the value of the one a search finds first.
async fn a_snapshot_keeps_the_fields_its_item_carries(s: SqlStore) {
    const CARRY: &[&str] = &["exports"];
    let f = Filter::data_eq("research_id", "s1");
    let save = |n: i64| {
        let (s, f) = (s.clone(), f.clone());
        async move {
            s.replace_where(
                &scope(),
                &f,
                None,
                CARRY,
                vec![json!({"research_id": "s1", "n": n, "exports": "the record's own"})],
            )
            .await
            .unwrap()
        }
    };
    let first = save(0).await;
    assert_eq!(
        first[0].data,
        json!({"research_id": "s1", "n": 0, "exports": null})
    );
    let id = first[0].id.clone();
    s.set_field(&id, "exports.pdf", json!("p")).await.unwrap();
    let again = save(1).await;
    assert_eq!(again[0].id, id, "saved in place");
    assert_eq!(
        again[0].data,
        json!({"research_id": "s1", "n": 1, "exports": {"pdf": "p"}})
    );

    // Snapshots and fields written at once: every field set stays.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let snapshot = save(2 + i);
        tasks.spawn(async move {
            snapshot.await;
        });
        let (s, id) = (s.clone(), id.clone());
        tasks.spawn(async move {
            s.set_field(&id, &format!("exports.f{i}"), json!(i))
                .await
                .unwrap()
                .expect("the item");
        });
    }
    tasks.join_all().await;
    let page = first_items(&s, f.clone()).await;
    assert_eq!(page.total, Some(1));
    let data = &page.items[0].data;
    for i in 0..40 {
        assert_eq!(data["exports"][format!("f{i}")], i, "f{i} lost: {data}");
    }
    assert_eq!(data["exports"]["pdf"], "p");

    // Two items of one record (written before anything kept them to one): replaced by one,
    // which carries the field of the one a search finds first, whose field was written.
    let dup = Filter::data_eq("research_id", "dup");
    let found = add(&s, json!({"research_id": "dup", "exports": "older"})).await;
    add(&s, json!({"research_id": "dup", "exports": "newer"})).await;
    assert_eq!(first_items(&s, dup.clone()).await.items[0].id, found.id);
    s.set_field(&found.id, "exports", json!("written"))
        .await
        .unwrap();
    let replaced = s
        .replace_where(
            &scope(),
            &dup,
            None,
            CARRY,
            vec![json!({"research_id": "dup"})],
        )
        .await
        .unwrap();
    assert_eq!(replaced.len(), 1);
    assert_eq!(replaced[0].data["exports"], "written");
    assert_eq!(first_items(&s, dup).await.total, Some(1));

    let refused = |carry: &'static [&'static str], record: Value| {
        let (s, f) = (s.clone(), f.clone());
        async move {
            matches!(
                s.replace_where(&scope(), &f, None, carry, vec![record])
                    .await,
                Err(StoreError::Invalid(_))
            )
        }
    };
    assert!(refused(&["exports.pdf"], json!({"research_id": "s1"})).await);
    assert!(refused(&["a b"], json!({"research_id": "s1"})).await);
    assert!(refused(CARRY, json!(["not", "an", "object"])).await);
    assert_eq!(
        first_items(&s, f).await.items[0].data["exports"]["pdf"],
        "p",
        "a refused snapshot wrote nothing"
    );
}

/// Waits, up to 20 s, until a statement of this Postgres database matching `like` waits for a
/// lock; `who` names it if it never does.
async fn until_waiting_on_a_lock(s: &SqlStore, like: &str, who: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock' \
             AND query LIKE $1",
        )
        .bind(like)
        .fetch_one(s.pool())
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{who} never waited for the lock"
        );
        tokio::task::yield_now().await;
    }
}

async fn artifacts_are_content_addressed(s: SqlStore) {
    let a = s.put_artifact("text/plain", b"hello").await.unwrap();
    let b = s.put_artifact("text/plain", b"hello").await.unwrap();
    assert_eq!(a, b);
    assert_eq!(
        a.file_id,
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    let got = s.get_artifact(&a.file_id).await.unwrap().unwrap();
    assert_eq!(got.bytes, b"hello");
    assert_eq!(got.meta.size, 5);
    assert!(s.get_artifact("00").await.unwrap().is_none());
    let c: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM artifacts")
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(c, 1, "same bytes stored twice");
}

async fn a_batch_claim_takes_at_most_its_limit_oldest_first(s: SqlStore) {
    for i in 0..5 {
        new_run(&s, &format!("r{i}")).await;
        // Distinct times, so "oldest first" has one answer.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    // The oldest moved last: taken, a step committed, let go (as when its driver's process
    // stops mid-run). It still goes first: runs under way finish before newer ones start.
    let (_, lease) = s.claim_run("r0", "w_pre", 60_000).await.unwrap().unwrap();
    let start = next_pending(&s, "r0").await.unwrap();
    s.commit_step(
        &lease,
        &commit(start.id, vec![env(0)], StepOutcome::Continue),
    )
    .await
    .unwrap();
    assert_eq!(s.release_owner("w_pre").await.unwrap(), 1);
    // A worker that drives other workflows only leaves these alone, and has none left.
    let other = s
        .claim_runs("w0", 60_000, &[], &["other".to_string()], 3, false)
        .await
        .unwrap();
    assert!(other.runs.is_empty(), "not its workflow: not its to take");
    assert!(!other.more, "nothing of its workflows is left");
    let first = s
        .claim_runs(
            "w1",
            60_000,
            &[],
            &["wf".to_string(), "other".to_string()],
            3,
            false,
        )
        .await
        .unwrap();
    assert!(first.more, "two runs were left to claim");
    let first = first.runs;
    let ids: Vec<&str> = first.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(
        ids,
        ["r0", "r1", "r2"],
        "the three oldest, once each, though r0 was updated last"
    );
    // A free run's pending step events come with its claim: its start event, or what its
    // last step sent.
    for c in &first {
        let pending = c.pending.as_ref().expect("read with the claim");
        let read = s.pending_events(&c.run.id, 10).await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(
            (pending[0].id, &pending[0].event_type, &pending[0].payload),
            (read[0].id, &read[0].event_type, &read[0].payload),
            "the same event its driver would read"
        );
        let sent = if c.run.id == "r0" {
            json!({"k": 1})
        } else {
            json!({"q": "hello"})
        };
        assert_eq!(pending[0].payload, sent);
    }
    let rest = s
        .claim_runs("w2", 60_000, &[], &[], 3, false)
        .await
        .unwrap()
        .runs;
    let ids: Vec<&str> = rest.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(
        ids,
        ["r3", "r4"],
        "fewer than the limit: there were no more"
    );
    assert!(
        s.claim_runs("w3", 60_000, &[], &[], 3, false)
            .await
            .unwrap()
            .runs
            .is_empty()
    );
    // Leases that ran out are taken over only when asked for.
    let short = s.claim_runs("w4", 60_000, &[], &[], 1, true).await.unwrap();
    assert!(short.runs.is_empty(), "no lease has run out yet");
    assert!(s.release_owner("w1").await.unwrap() == 3);
    // Exactly the limit, with none left: the claim says so (no look for more is needed).
    let again = s.claim_runs("w5", 1, &[], &[], 3, false).await.unwrap();
    assert_eq!(again.runs.len(), 3);
    assert!(!again.more, "nothing was left to claim");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let taken = s
        .claim_runs("w6", 60_000, &[], &[], 10, true)
        .await
        .unwrap()
        .runs;
    assert_eq!(
        taken.len(),
        3,
        "the three whose one-millisecond lease ran out"
    );
    assert!(taken.iter().all(|c| c.lease.owner == "w6"));
    assert!(
        taken.iter().all(|c| c.pending.is_none()),
        "a run taken over has its inbox read by its driver, after the claim"
    );
}

/// A newer fathom migrated the database further (a rolling upgrade, or a rollback after
/// one): this one still opens it and works on it, rather than refusing to start.
async fn a_database_migrated_by_a_newer_version_still_opens(dialect: Dialect) {
    let db = fresh(dialect).await;
    let newer = "INSERT INTO _sqlx_migrations (version, description, success, checksum, \
                 execution_time) VALUES (9999, 'from a newer fathom', TRUE, $1, 0)";
    sqlx::query(newer)
        .bind(vec![0u8; 48])
        .execute(db.store.pool())
        .await
        .unwrap();
    let older = fathom_testkit::db::TestDb::open(&db.url).await;
    new_run(&older.store, "after-a-newer-migration").await;
    let run = older
        .store
        .get_run("after-a-newer-migration")
        .await
        .unwrap();
    assert_eq!(run.unwrap().status, RunStatus::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_database_migrated_by_a_newer_version_still_opens() {
    a_database_migrated_by_a_newer_version_still_opens(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_migrated_by_a_newer_version_still_opens() {
    a_database_migrated_by_a_newer_version_still_opens(Dialect::Postgres).await;
}

/// Deleting a run deletes it and every row of it: stream, step journal, step inbox, call
/// journal and mailbox (on Postgres these rows do not reference the run, so nothing deletes
/// them with it). A commit writing to the run when the delete comes is waited for, and its
/// rows go too.
async fn deleting_a_run_deletes_its_rows_those_of_a_commit_holding_it_too(s: SqlStore) {
    new_run(&s, "r1").await;
    new_run(&s, "r2").await;
    let lease = loop {
        let (run, lease) = s.claim_next("w1", 10_000, &[]).await.unwrap().unwrap();
        if run.id == "r1" {
            break lease;
        }
    };
    s.journal_put(&lease, 1, "llm", &json!({"a": 1}), &[env(0)])
        .await
        .unwrap();
    let start = next_pending(&s, "r1").await.unwrap();
    s.commit_step(
        &lease,
        &commit(start.id, vec![env(1)], StepOutcome::Continue),
    )
    .await
    .unwrap();
    s.deliver(
        "r1",
        NewMessage {
            event_type: "Approve".into(),
            payload: json!({}),
            idempotency_key: Some("k".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let tables = [
        "runs",
        "run_events",
        "step_journal",
        "run_inbox",
        "call_journal",
        "mailbox",
    ];
    let rows = |run: &'static str| {
        let s = s.clone();
        async move {
            let mut counts = Vec::new();
            for t in tables {
                let column = if t == "runs" { "id" } else { "run_id" };
                let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT COUNT(*) FROM {t} WHERE {column} = '{run}'"
                )))
                .fetch_one(s.pool())
                .await
                .unwrap();
                counts.push((t, n));
            }
            counts
        }
    };
    assert!(
        rows("r1").await.iter().all(|(_, n)| *n > 0),
        "{:?}",
        rows("r1").await
    );
    let others = rows("r2").await;

    // A commit holding the run's row, one more stream event in it, when the delete comes.
    let mut tx = s.pool().begin().await.unwrap();
    sqlx::query("UPDATE runs SET next_seq = next_seq + 1 WHERE id = 'r1'")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO run_events (run_id, seq, event_type, envelope, created_at) \
         VALUES ('r1', 2, 'Tick', '{}', 0)",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    let deleting = {
        let s = s.clone();
        tokio::spawn(async move { s.delete_run("r1").await })
    };
    // On SQLite writes take turns, so the delete comes after the commit whichever way it is
    // scheduled; on Postgres it is seen waiting for the run's row first.
    if s.dialect() == Dialect::Postgres {
        until_waiting_on_a_lock(&s, "DELETE FROM runs%", "the delete").await;
    }
    tx.commit().await.unwrap();
    assert!(deleting.await.unwrap().unwrap(), "the run was there");
    assert!(
        rows("r1").await.iter().all(|(_, n)| *n == 0),
        "{:?}",
        rows("r1").await
    );
    // Its lease holder, come late, writes nothing for the run that is gone.
    let late = s
        .commit_step(
            &lease,
            &commit(start.id, vec![env(3)], StepOutcome::Continue),
        )
        .await;
    assert!(late.is_err(), "a commit to a deleted run: {late:?}");
    let late = s.journal_put(&lease, 2, "llm", &json!(2), &[env(4)]).await;
    assert!(late.is_err(), "a journaled call to a deleted run: {late:?}");
    assert!(s.append_stream(&lease, &[env(5)]).await.is_err());
    assert!(
        rows("r1").await.iter().all(|(_, n)| *n == 0),
        "{:?}",
        rows("r1").await
    );
    assert_eq!(rows("r2").await, others, "another run's rows were touched");
    assert!(!s.delete_run("r1").await.unwrap(), "deleted twice");
}
