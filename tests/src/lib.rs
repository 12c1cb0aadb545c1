//! Workflows and helpers shared by the end-to-end tests, the crash worker and the benchmarks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fathom_engine::store::{RunRecord, RunStore};
use fathom_engine::{
    Ctx, ErasedWorkflow, RetryPolicy, StepError, StepOptions, Workflow, impl_event,
};
use fathom_store::{Dialect, SqlStore};
use serde::{Deserialize, Serialize};
use sqlx::AnyPool;

pub const CRASH_WORKFLOW: &str = "crash-test";

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrashStart {
    pub n: i64,
}
impl_event!(CrashStart, "CrashStart");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Hop {
    pub step: i64,
}
impl_event!(Hop, "Hop");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AtGate {}
impl_event!(AtGate, "AtGate");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Resume {}
impl_event!(Resume, "Resume");

/// The external event the crash workflow waits for.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Go {
    pub bonus: i64,
}
impl_event!(Go, "Go");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Progress {
    pub step: String,
    pub total: i64,
}
impl_event!(Progress, "Progress");

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrashResult {
    pub total: i64,
}
impl_event!(
    CrashResult,
    "CrashResult",
    qualified = "fathom_e2e.CrashResult",
    types = ["StopEvent"]
);

#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrashState {
    pub n: i64,
    pub total: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Effect {
    exec_id: i64,
    value: i64,
}

/// The side table where every execution of a journaled call is counted.
pub async fn create_effects_table(pool: &AnyPool, dialect: Dialect) {
    let id = match dialect {
        Dialect::Postgres => "id BIGSERIAL PRIMARY KEY",
        Dialect::Sqlite => "id INTEGER PRIMARY KEY AUTOINCREMENT",
    };
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE IF NOT EXISTS crash_effects ({id}, run_id TEXT NOT NULL, call_key TEXT NOT NULL)"
    )))
    .execute(pool)
    .await
    .expect("create crash_effects");
}

/// A journaled call whose execution is recorded in `crash_effects` and takes a little time,
/// like a call to an outside service.
async fn effect(
    ctx: &Ctx<CrashState>,
    pool: &AnyPool,
    key: &str,
    value: i64,
) -> Result<i64, StepError> {
    let run_id = ctx.run_id().to_string();
    let journal_key = format!("{}:{key}", ctx.step_name());
    // Unique per run, step invocation and key: the same key in the same invocation is the
    // same call.
    let call_key = ctx.idempotency_key(&journal_key)?;
    let pool = pool.clone();
    let out: Effect = ctx
        .run(&journal_key, || async move {
            let exec_id: i64 = sqlx::query_scalar(
                "INSERT INTO crash_effects (run_id, call_key) VALUES ($1, $2) RETURNING id",
            )
            .bind(&run_id)
            .bind(&call_key)
            .fetch_one(&pool)
            .await
            .map_err(|e| e.to_string())?;
            tokio::time::sleep(Duration::from_millis(4)).await;
            Ok::<_, String>(Effect { exec_id, value })
        })
        .await?;
    Ok(out.value)
}

/// Six steps: two journaled calls in each working step, a wait for `Go` in the middle, and a
/// stream event per step. The result is a function of `n` and the first `Go` delivered.
pub fn crash_workflow(pool: AnyPool) -> Arc<dyn ErasedWorkflow> {
    let opts = StepOptions {
        timeout: Duration::from_secs(30),
        retry: RetryPolicy::attempts(5),
    };
    let (p1, p2, p4) = (pool.clone(), pool.clone(), pool);
    Workflow::<CrashState>::new::<CrashStart>(CRASH_WORKFLOW)
        .accepts_external::<Go>()
        .step_with(
            "first",
            opts,
            move |ctx: Ctx<CrashState>, ev: CrashStart| {
                let pool = p1.clone();
                async move {
                    let a = effect(&ctx, &pool, "a", ev.n).await?;
                    let b = effect(&ctx, &pool, "b", 1).await?;
                    let total = ctx.edit_state(|s| {
                        s.n = ev.n;
                        s.total += a + b;
                        s.total
                    });
                    ctx.write_stream(&Progress {
                        step: "first".into(),
                        total,
                    })?;
                    ctx.send(Hop { step: 2 })
                }
            },
        )
        .step_with("hop", opts, move |ctx: Ctx<CrashState>, ev: Hop| {
            let pool = p2.clone();
            async move {
                let a = effect(&ctx, &pool, "a", ev.step * 10).await?;
                let b = effect(&ctx, &pool, "b", ev.step * 100).await?;
                let total = ctx.edit_state(|s| {
                    s.total += a + b;
                    s.total
                });
                ctx.write_stream(&Progress {
                    step: format!("hop{}", ev.step),
                    total,
                })?;
                // hop2 -> gate -> hop3 -> hop4 -> hop5 -> last
                match ev.step {
                    2 => ctx.send(AtGate {}),
                    5 => ctx.send(Resume {}),
                    n => ctx.send(Hop { step: n + 1 }),
                }
            }
        })
        .step_with("gate", opts, |ctx: Ctx<CrashState>, _: AtGate| async move {
            let go: Go = ctx.wait_for::<Go>().await?;
            let total = ctx.edit_state(|s| {
                s.total += go.bonus;
                s.total
            });
            ctx.write_stream(&Progress {
                step: "gate".into(),
                total,
            })?;
            ctx.send(Hop { step: 3 })
        })
        .step_with("last", opts, move |ctx: Ctx<CrashState>, _: Resume| {
            let pool = p4.clone();
            async move {
                let a = effect(&ctx, &pool, "a", 1000).await?;
                let total = ctx.edit_state(|s| {
                    s.total += a;
                    s.total
                });
                ctx.write_stream(&Progress {
                    step: "last".into(),
                    total,
                })?;
                ctx.stop(&CrashResult { total })
            }
        })
        .build()
}

/// The total a crash-workflow run must end with.
pub fn expected_total(n: i64, bonus: i64) -> i64 {
    // first: n + 1; hops 2..=5: 110 * step; gate: bonus; last: 1000.
    n + 1 + (2..=5).map(|s| 110 * s).sum::<i64>() + bonus + 1000
}

/// Waits until `pred` holds for the run, or panics at the deadline.
pub async fn wait_for_run(
    store: &dyn RunStore,
    run_id: &str,
    timeout: Duration,
    pred: impl Fn(&RunRecord) -> bool,
) -> RunRecord {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(run) = store.get_run(run_id).await.expect("get_run")
            && pred(&run)
        {
            return run;
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} did not reach the expected state in {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Follows run `run_id` on `engine`'s signals until it ends, sending `event_type` with
/// `payload` once, as soon as `ready` holds for the run. Returns the ended run, or None if it
/// stood still for `patience` (nothing changed) before ending.
pub async fn approve_and_finish(
    engine: &Arc<fathom_engine::Engine>,
    run_id: &str,
    ready: impl Fn(&RunRecord) -> bool,
    (event_type, payload): (&str, serde_json::Value),
    patience: Duration,
) -> Option<RunRecord> {
    let mut watch = engine.watch(run_id);
    let mut sent = false;
    // Bounded by the run's life: each pass waits for a change and reads the run when it may
    // have moved on (not for a step's commit here that only streamed events).
    loop {
        let now = engine.store().get_run(run_id).await.expect("get_run")?;
        if !sent && ready(&now) {
            engine
                .send_to(&now.head(), event_type, payload.clone(), None)
                .await
                .expect("send");
            sent = true;
        }
        if now.status.is_terminal() {
            return Some(now);
        }
        drop(now);
        loop {
            tokio::time::timeout(patience, watch.changed()).await.ok()?;
            if watch.record_may_have_changed() {
                break;
            }
        }
    }
}

pub async fn connect(url: &str) -> SqlStore {
    SqlStore::connect(url).await.expect("connect")
}
