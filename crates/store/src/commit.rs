//! Fenced writes to a run in one round trip: a step's commit, a journaled call's result,
//! and a live stream append.
//!
//! Every statement of the write is gated on the lease: it applies only where the run is
//! still `running` under the writer's fence. On Postgres the statements are data-modifying
//! CTEs of one statement, gated on the fenced `UPDATE runs` (which takes the row lock), so
//! the write is one round trip and atomic without a transaction. SQLite has no such CTEs, so
//! the statements go as one multi-statement body that begins an immediate transaction (the
//! only write lock) and commits it, gated on the same fence condition, with the
//! `UPDATE runs` last: one round trip to the connection's thread. Rows of a variable count
//! (stream events, sent events) travel in a fixed number of parameters, so the SQL text does
//! not grow with them (see [`Write::rows`]).

use fathom_engine::Envelope;
use fathom_engine::store::{
    Committed, Lease, StepCommit, StepOutcome, StoreError, StoreResult, SuspendOutcome,
};
use sqlx::Row;

use crate::sql::Params;
use crate::{Dialect, SqlStore, db_err};

/// Joins the values of one column of rows in a single Postgres parameter (`chr(30)`).
const RECORD_SEPARATOR: char = '\u{1e}';

/// The runs update of a fenced write: what it sets besides `next_seq` and `updated_at`.
struct RunUpdate {
    /// Extra `SET` assignments, already holding their placeholders.
    set: String,
    /// Whether the write says if it left the run waiting (a row of kind `parked`).
    tells_parked: bool,
}

/// One fenced write being built: statements gated on the lease, and the runs update.
struct Write<'a> {
    dialect: Dialect,
    /// What the stream's change notice says (Postgres) before and after the stream's new
    /// head: who wrote it, and the run.
    notice: (String, String),
    p: Params,
    lease: &'a Lease,
    run_id: String,
    owner: String,
    fence: String,
    now: String,
    /// Number of stream events written (the run's `next_seq` moves by it).
    n: String,
    /// Statements gated on the lease, by kind; those with `RETURNING` give (kind, id) rows.
    steps: Vec<(&'static str, String)>,
}

impl<'a> Write<'a> {
    fn new(store: &SqlStore, lease: &'a Lease, now: i64, events: usize) -> Self {
        let mut p = Params::default();
        let run_id = p.text(lease.run_id.clone());
        let owner = p.text(lease.owner.clone());
        let fence = p.int(lease.fence);
        let now = p.int(now);
        let n = p.int(events as i64);
        Write {
            dialect: store.dialect(),
            notice: store.change_notice_around_head(&lease.run_id),
            p,
            lease,
            run_id,
            owner,
            fence,
            now,
            n,
            steps: Vec::new(),
        }
    }

    /// A FROM item with one row while the lease holds, as `g`, with `g.first_seq`: the
    /// sequence number of this write's first event.
    fn gate(&self) -> String {
        match self.dialect {
            Dialect::Postgres => "run g".to_string(),
            Dialect::Sqlite => format!(
                "(SELECT next_seq AS first_seq FROM runs WHERE id = {} AND lease_owner = {} \
                 AND fence = {} AND status = 'running') g",
                self.run_id, self.owner, self.fence
            ),
        }
    }

    /// A FROM item over rows of (event type, JSON text), as `r`, with `r.event_type`,
    /// `r.body` and `r.idx` (the row's position from 0). On Postgres each column is one text
    /// parameter, its values joined by the ASCII record separator: splitting that is a byte
    /// scan, where a JSON array of them was lexed once whole and again for each field (a
    /// third of a step commit's time on the database with a dozen events). The separator
    /// cannot occur in JSON text (serde_json escapes every control character); an event type
    /// with a control character is refused on both databases. SQLite reads one JSON array
    /// parameter of pairs.
    fn rows<'r>(
        &mut self,
        rows: impl IntoIterator<Item = (&'r str, String)>,
    ) -> StoreResult<String> {
        let rows: Vec<(&str, String)> = rows.into_iter().collect();
        if let Some((event_type, _)) = rows
            .iter()
            .find(|(t, body)| t.chars().any(char::is_control) || body.contains(RECORD_SEPARATOR))
        {
            return Err(StoreError::Invalid(format!(
                "event type {event_type:?} holds a control character"
            )));
        }
        match self.dialect {
            Dialect::Postgres => {
                let (mut types, mut bodies) = (String::new(), String::new());
                for (i, (event_type, body)) in rows.into_iter().enumerate() {
                    if i > 0 {
                        types.push(RECORD_SEPARATOR);
                        bodies.push(RECORD_SEPARATOR);
                    }
                    types.push_str(event_type);
                    bodies.push_str(&body);
                }
                let (types, bodies) = (self.p.text(types), self.p.text(bodies));
                Ok(format!(
                    "(SELECT u.event_type, u.body, u.ord - 1 AS idx FROM \
                     unnest(string_to_array({types}, chr(30)), string_to_array({bodies}, chr(30))) \
                     WITH ORDINALITY AS u(event_type, body, ord)) r"
                ))
            }
            Dialect::Sqlite => {
                let pairs: Vec<serde_json::Value> = rows
                    .into_iter()
                    .map(|(event_type, body)| serde_json::json!([event_type, body]))
                    .collect();
                let p = self.p.text(serde_json::Value::Array(pairs).to_string());
                Ok(format!(
                    "(SELECT value ->> 0 AS event_type, value ->> 1 AS body, key AS idx \
                     FROM json_each({p})) r"
                ))
            }
        }
    }

    fn stream(&mut self, stream: &[&Envelope]) -> StoreResult<()> {
        if stream.is_empty() {
            return Ok(());
        }
        // Each envelope as its JSON text, so it is stored byte for byte.
        let texts = stream
            .iter()
            .map(|env| Ok((env.event_type.as_str(), to_text(env)?)))
            .collect::<StoreResult<Vec<_>>>()?;
        let rows = self.rows(texts)?;
        let sql = format!(
            "INSERT INTO run_events (run_id, seq, event_type, envelope, created_at) \
             SELECT {id}, g.first_seq + r.idx, r.event_type, r.body, {now} \
             FROM {gate}, {rows}",
            id = self.run_id,
            now = self.now,
            gate = self.gate(),
        );
        self.steps.push(("events", sql));
        if self.dialect == Dialect::Postgres {
            let channel = self.p.text(crate::CHANGES_CHANNEL);
            let before = self.p.text(self.notice.0.clone());
            let after = self.p.text(self.notice.1.clone());
            self.steps.push((
                "notify",
                format!(
                    "SELECT pg_notify({channel}, {before} || CAST(first_seq + {n} AS TEXT) || \
                     {after}) FROM run",
                    n = self.n
                ),
            ));
        }
        Ok(())
    }

    /// `SET` assignments that park the run waiting for `event_type`, unless its mailbox
    /// counter moved past `seen_mailbox_seq` (mail arrived since the step looked): then it
    /// stays running under the lease, to look again.
    fn park(&mut self, event_type: &str, seen_mailbox_seq: i64) -> String {
        let waits = format!("mailbox_seq = {}", self.p.int(seen_mailbox_seq));
        let event_type = self.p.text(event_type.to_string());
        format!(
            ", status = CASE WHEN {waits} THEN 'waiting' ELSE 'running' END, \
             waiting_for = CASE WHEN {waits} THEN {event_type} ELSE waiting_for END, \
             lease_owner = CASE WHEN {waits} THEN NULL ELSE lease_owner END, \
             lease_expires_at = CASE WHEN {waits} THEN NULL ELSE lease_expires_at END"
        )
    }

    /// Builds and runs the write; `update` is applied to the run last. Returns the first
    /// sequence number (None: the lease is gone and nothing was written) and the rows the
    /// gated statements returned, as (kind, id). A gated statement that finds its event or
    /// message already taken fails the whole write (a constraint it breaks on purpose).
    async fn run(
        self,
        store: &SqlStore,
        update: RunUpdate,
    ) -> StoreResult<Option<(i64, Vec<(String, i64)>)>> {
        let set = format!(
            "next_seq = next_seq + {n}, updated_at = {now}{extra}",
            n = self.n,
            now = self.now,
            extra = update.set
        );
        let fenced = format!(
            "id = {} AND lease_owner = {} AND fence = {} AND status = 'running'",
            self.run_id, self.owner, self.fence
        );
        let rows = match self.dialect {
            Dialect::Postgres => {
                let mut sql = format!(
                    "WITH run AS (UPDATE runs SET {set} WHERE {fenced} \
                     RETURNING next_seq - {n} AS first_seq, status)",
                    n = self.n
                );
                let mut select = vec!["SELECT 'run' AS kind, first_seq AS v FROM run".to_string()];
                if update.tells_parked {
                    select.push(
                        "SELECT 'parked', CAST(1 AS BIGINT) FROM run WHERE status = 'waiting'"
                            .to_string(),
                    );
                }
                for (i, (kind, stmt)) in self.steps.iter().enumerate() {
                    // A CTE's side effects happen only if something reads it.
                    let materialized = if *kind == "notify" {
                        " MATERIALIZED"
                    } else {
                        ""
                    };
                    sql.push_str(&format!(", s{i} AS{materialized} ({stmt})"));
                    if stmt.contains("RETURNING") {
                        select.push(format!("SELECT '{kind}', v FROM s{i}"));
                    } else if *kind == "notify" {
                        select.push(format!("SELECT 'notify', CAST(0 AS BIGINT) FROM s{i}"));
                    }
                }
                sql.push(' ');
                sql.push_str(&select.join(" UNION ALL "));
                self.p
                    .query(sql)
                    .fetch_all(&store.db)
                    .await
                    .map_err(|e| conflict_or_failure(e, self.lease))?
            }
            Dialect::Sqlite => {
                let mut body = vec!["BEGIN IMMEDIATE".to_string()];
                body.extend(self.steps.iter().map(|(_, s)| s.clone()));
                body.push(format!(
                    "UPDATE runs SET {set} WHERE {fenced} RETURNING 'run' AS kind, \
                     next_seq - {n} AS v",
                    n = self.n
                ));
                if update.tells_parked {
                    // Read only when the update applied (the lease held): the run is ours.
                    body.push(format!(
                        "SELECT 'parked' AS kind, 1 AS v FROM runs WHERE id = {} \
                         AND status = 'waiting' AND changes() > 0",
                        self.run_id
                    ));
                }
                body.push("COMMIT".to_string());
                let lease = self.lease;
                store
                    .run_body(self.p.query(body.join(";\n")), |e| {
                        conflict_or_failure(e, lease)
                    })
                    .await?
            }
        };
        let got = read_rows(&rows)?;
        let Some(first_seq) = got.iter().find(|(k, _)| k == "run").map(|(_, v)| *v) else {
            return Ok(None);
        };
        store.count_commit();
        Ok(Some((first_seq, got)))
    }
}

impl SqlStore {
    /// Runs a SQLite body that begins and commits its own transaction (`BEGIN IMMEDIATE; ...;
    /// COMMIT`) in one round trip, holding this process's turn to write; `failed` renders
    /// its error. Every row is fetched, so that every statement of it runs.
    pub(crate) async fn run_body(
        &self,
        body: sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments>,
        failed: impl FnOnce(sqlx::Error) -> StoreError,
    ) -> StoreResult<Vec<sqlx::any::AnyRow>> {
        let mut conn = OpenTransaction::acquire(self).await?;
        let rows = body.fetch_all(conn.get()?).await.map_err(failed)?;
        conn.committed();
        Ok(rows)
    }

    /// A write of one round trip: one statement on Postgres, a body that begins and commits
    /// its own transaction on SQLite (see [`SqlStore::run_body`]).
    pub(crate) async fn fetch_write(
        &self,
        write: sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments>,
    ) -> StoreResult<Vec<sqlx::any::AnyRow>> {
        match self.dialect() {
            Dialect::Postgres => write.fetch_all(&self.db).await.map_err(db_err),
            Dialect::Sqlite => self.run_body(write, db_err).await,
        }
    }
}

/// A SQLite connection whose transaction (begun inside a multi-statement body) may still be
/// open: unless handed back once the body has committed, it is closed rather than returned
/// to the pool, and closing it rolls the transaction back. So a write that fails or is
/// cancelled halfway leaves nothing behind, on the database or in the pool.
/// It holds this process's turn to write until it is done.
struct OpenTransaction {
    conn: Option<fathom_pool::Lent<sqlx::Any>>,
    _turn: crate::WriteTurn,
}

impl OpenTransaction {
    async fn acquire(store: &SqlStore) -> StoreResult<Self> {
        let turn = store.write_turn().await;
        Ok(OpenTransaction {
            conn: Some(store.db.lend().await.map_err(db_err)?),
            _turn: turn,
        })
    }

    /// The connection, to run the body on.
    fn get(&mut self) -> StoreResult<&mut sqlx::AnyConnection> {
        match self.conn.as_mut() {
            Some(c) => Ok(c.get()),
            None => Err(StoreError::backend("connection vanished")),
        }
    }

    /// The body ran to its COMMIT: the connection is kept for the next statement.
    fn committed(mut self) {
        if let Some(conn) = self.conn.take() {
            conn.done();
        }
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.into_inner().close_on_drop();
        }
    }
}

/// A write refused because another writer consumed the same event or message first (the
/// step journal's one-commit-per-event key, or a taken message's status turning NULL) is a
/// conflict; anything else is the database failing.
fn conflict_or_failure(e: sqlx::Error, lease: &Lease) -> StoreError {
    let taken = e.as_database_error().is_some_and(|d| {
        matches!(
            d.kind(),
            sqlx::error::ErrorKind::UniqueViolation | sqlx::error::ErrorKind::NotNullViolation
        )
    });
    if taken {
        StoreError::Conflict(format!(
            "a consumed event or message of run {} is no longer pending",
            lease.run_id
        ))
    } else {
        db_err(e)
    }
}

fn read_rows(rows: &[sqlx::any::AnyRow]) -> StoreResult<Vec<(String, i64)>> {
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get(0).map_err(db_err)?,
                row.try_get(1).map_err(db_err)?,
            ))
        })
        .collect()
}

fn to_text(v: &impl serde::Serialize) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid(format!("unserializable value: {e}")))
}

fn seqs(first: i64, n: usize) -> Vec<i64> {
    (first..first + n as i64).collect()
}

/// What a step's outcome leaves the run with.
struct StepEnd<'c> {
    /// The run's status after the step.
    status: &'static str,
    /// The run's result as JSON text, when it completed.
    result: Option<String>,
    /// The run's error, when it failed.
    error: Option<String>,
    /// The outcome the step journal records for the commit's last step.
    outcome: &'static str,
    /// The event that ends the stream, when the run ended.
    last: Option<&'c Envelope>,
}

impl<'c> StepEnd<'c> {
    /// Reads what the run is left with from the step's outcome.
    fn of(outcome: &'c StepOutcome) -> StoreResult<Self> {
        let (status, result, error, outcome, last) = match outcome {
            StepOutcome::Continue => ("running", None, None, "continued", None),
            StepOutcome::Completed(env) => (
                "completed",
                Some(to_text(env)?),
                None,
                "completed",
                Some(env),
            ),
            StepOutcome::Failed { error, event } => {
                ("failed", None, Some(error.clone()), "failed", Some(event))
            }
        };
        Ok(StepEnd {
            status,
            result,
            error,
            outcome,
            last,
        })
    }
}

/// The phases of a step's commit (see [`SqlStore::write_step`]), each adding its gated
/// statements or the runs update, with their parameters in the order the commit binds them.
impl Write<'_> {
    /// Marks the inbox event the step consumed, if any, and returns the placeholder of its id
    /// for the rows that record what consumed them (a NULL when none).
    fn consume_inbox(&mut self, consumed: Option<i64>, gate: &str) -> String {
        if let Some(consumed) = consumed {
            let id = self.p.int(consumed);
            self.steps.push((
                "consumed",
                format!(
                    "UPDATE run_inbox SET consumed_at = {now} WHERE id = {id} AND run_id = {run} \
                     AND consumed_at IS NULL AND EXISTS (SELECT 1 FROM {gate}) \
                     RETURNING 'consumed' AS kind, id AS v",
                    now = self.now,
                    run = self.run_id,
                ),
            ));
        }
        match consumed {
            Some(id) => self.p.int(id),
            None => "CAST(NULL AS BIGINT)".to_string(),
        }
    }

    /// Records the step in the step journal, with every step chained to it.
    fn journal_steps(&mut self, c: &StepCommit, inbox_id: &str, outcome_name: &str, gate: &str) {
        // A row for the step, and one for each step chained to it, which took an event
        // never stored (no inbox id); the last of them has the commit's outcome. One
        // statement, so their ids follow their order.
        let chained = c
            .chained
            .iter()
            .map(|s| (s.step.as_str(), s.attempt, s.started_at));
        let rows: Vec<_> = std::iter::once((c.step.as_str(), c.attempt, c.started_at))
            .chain(chained)
            .collect();
        let mut selects = Vec::with_capacity(rows.len());
        for (i, (step, attempt, started_at)) in rows.iter().enumerate() {
            let inbox_id = match i {
                0 => inbox_id.to_string(),
                _ => "CAST(NULL AS BIGINT)".to_string(),
            };
            let step = self.p.text(step.to_string());
            let attempt = self.p.int(*attempt);
            let started = self.p.int(*started_at);
            let outcome = match i + 1 == rows.len() {
                true => self.p.text(outcome_name),
                false => self.p.text("continued"),
            };
            selects.push(format!(
                "SELECT {run}, {inbox_id}, {step}, {attempt}, {outcome}, {started}, {now} \
                 FROM {gate}",
                run = self.run_id,
                now = self.now,
            ));
        }
        self.steps.push((
            "journal",
            format!(
                "INSERT INTO step_journal (run_id, inbox_id, step, attempt, outcome, started_at, \
                 finished_at) {}",
                selects.join(" UNION ALL ")
            ),
        ));
    }

    /// Puts the events the step sent to other steps in the run's inbox, in the order sent.
    fn send_events(&mut self, sent: &[(String, serde_json::Value)], gate: &str) -> StoreResult<()> {
        if sent.is_empty() {
            return Ok(());
        }
        let texts = sent
            .iter()
            .map(|(t, payload)| Ok((t.as_str(), to_text(payload)?)))
            .collect::<StoreResult<Vec<_>>>()?;
        let rows = self.rows(texts)?;
        self.steps.push((
            "sent",
            format!(
                "INSERT INTO run_inbox (run_id, event_type, payload, created_at) \
                 SELECT {run}, r.event_type, r.body, {now} FROM {gate}, {rows} \
                 ORDER BY r.idx RETURNING 'sent' AS kind, id AS v",
                run = self.run_id,
                now = self.now,
            ),
        ));
        Ok(())
    }

    /// Takes the mailbox messages the step consumed and supersedes the others of their types.
    fn consume_messages(&mut self, consumed: &[i64], inbox_id: &str, gate: &str) {
        if consumed.is_empty() {
            return;
        }
        let ids: Vec<String> = consumed.iter().map(|m| self.p.int(*m)).collect();
        let ids = ids.join(", ");
        self.steps.push((
            "message",
            format!(
                "UPDATE mailbox SET status = CASE WHEN status = 'pending' THEN 'consumed' END, \
                 consumed_at = {now}, consumed_by = {inbox_id} WHERE id IN ({ids}) \
                 AND run_id = {run} AND EXISTS (SELECT 1 FROM {gate}) \
                 RETURNING 'message' AS kind, id AS v",
                now = self.now,
                run = self.run_id,
            ),
        ));
        // A message no longer pending gets a NULL status, which the table refuses: the
        // write fails whole. Of two conflicting decisions exactly one applies: the others
        // of the same type are superseded with it.
        self.steps.push((
            "superseded",
            format!(
                "UPDATE mailbox SET status = 'superseded', consumed_at = {now} \
                 WHERE run_id = {run} AND status = 'pending' AND id NOT IN ({ids}) \
                 AND event_type IN (SELECT event_type FROM mailbox WHERE id IN ({ids})) \
                 AND EXISTS (SELECT 1 FROM {gate})",
                now = self.now,
                run = self.run_id,
            ),
        ));
    }

    /// The runs update that leaves the run as the step's outcome says: ended and unleased,
    /// parked, or running on.
    fn step_update(&mut self, c: &StepCommit, end: StepEnd<'_>) -> StoreResult<RunUpdate> {
        let terminal = if end.status == "running" { "0" } else { "1" };
        let state = match &c.state {
            Some(s) => self.p.text(to_text(s)?),
            None => "state".to_string(),
        };
        let result = match end.result {
            Some(r) => self.p.text(r),
            None => "result".to_string(),
        };
        let error = match end.error {
            Some(e) => self.p.text(e),
            None => "NULL".to_string(),
        };
        let status = self.p.text(end.status);
        let now = self.now.clone();
        let park = c.park.as_ref().filter(|_| terminal == "0");
        let set = if terminal == "1" {
            format!(
                ", state = {state}, status = {status}, result = {result}, error = {error}, \
                 completed_at = {now}, lease_owner = NULL, lease_expires_at = NULL"
            )
        } else if let Some((event_type, seen_mailbox_seq)) = park {
            let parks = self.park(event_type, *seen_mailbox_seq);
            format!(", state = {state}, result = {result}, error = {error}{parks}")
        } else {
            format!(", state = {state}, status = {status}, result = {result}, error = {error}")
        };
        Ok(RunUpdate {
            set,
            tells_parked: park.is_some(),
        })
    }
}

impl SqlStore {
    /// A step's commit: see [`fathom_engine::store::RunStore::commit_step`].
    pub(crate) async fn write_step(&self, lease: &Lease, c: &StepCommit) -> StoreResult<Committed> {
        let now = fathom_engine::store::now_ms();
        let end = StepEnd::of(&c.outcome)?;
        let stream: Vec<&Envelope> = c.stream.iter().chain(end.last).collect();
        let mut w = Write::new(self, lease, now, stream.len());
        let gate = w.gate();
        let inbox_id = w.consume_inbox(c.consumed, &gate);
        w.journal_steps(c, &inbox_id, end.outcome, &gate);
        w.stream(&stream)?;
        w.send_events(&c.sent, &gate)?;
        w.consume_messages(&c.mailbox_consumed, &inbox_id, &gate);
        let update = w.step_update(c, end)?;
        let n = stream.len();
        let Some((first, rows)) = w.run(self, update).await? else {
            return Err(StoreError::LeaseLost(lease.run_id.clone()));
        };
        let mut sent_ids: Vec<i64> = rows
            .iter()
            .filter(|(k, _)| k == "sent")
            .map(|(_, v)| *v)
            .collect();
        // Ids are handed out in insertion order, which is the order sent.
        sent_ids.sort_unstable();
        Ok(Committed {
            seqs: seqs(first, n),
            sent_ids,
            parked: rows.iter().any(|(k, _)| k == "parked"),
        })
    }

    /// A journaled call's result with the stream events that go with it: see
    /// [`fathom_engine::store::RunStore::journal_put`]. One round trip; when the call was
    /// stored first by someone else, the write fails whole on the journal's key and the kept
    /// result is read instead (its events are already in the stream).
    pub(crate) async fn write_call(
        &self,
        lease: &Lease,
        scope: i64,
        key: &str,
        value: &serde_json::Value,
        stream: &[Envelope],
    ) -> StoreResult<(serde_json::Value, Option<i64>)> {
        let now = fathom_engine::store::now_ms();
        let refs: Vec<&Envelope> = stream.iter().collect();
        let mut w = Write::new(self, lease, now, refs.len());
        let gate = w.gate();
        let scope_p = w.p.int(scope);
        let key_p = w.p.text(key.to_string());
        let result = w.p.text(to_text(value)?);
        w.steps.push((
            "call",
            format!(
                "INSERT INTO call_journal (run_id, scope, key, result, created_at) \
                 SELECT {run}, {scope_p}, {key_p}, {result}, {now} FROM {gate}",
                run = w.run_id,
                now = w.now,
            ),
        ));
        w.stream(&refs)?;
        match w
            .run(
                self,
                RunUpdate {
                    set: String::new(),
                    tells_parked: false,
                },
            )
            .await
        {
            Ok(Some((first, _))) => Ok((
                value.clone(),
                (!stream.is_empty()).then(|| first + stream.len() as i64 - 1),
            )),
            Ok(None) => Err(StoreError::LeaseLost(lease.run_id.clone())),
            Err(StoreError::Conflict(_)) => {
                let kept = crate::runs::journal_result(&self.db, &lease.run_id, scope, key)
                    .await?
                    .ok_or_else(|| StoreError::backend(format!("journal entry {key} vanished")))?;
                Ok((kept, None))
            }
            Err(e) => Err(e),
        }
    }

    /// A park: see [`fathom_engine::store::RunStore::suspend`]. One round trip, the same
    /// park as a step commit's ([`Write::park`]).
    pub(crate) async fn write_park(
        &self,
        lease: &Lease,
        event_type: &str,
        seen_mailbox_seq: i64,
    ) -> StoreResult<SuspendOutcome> {
        let mut w = Write::new(self, lease, fathom_engine::store::now_ms(), 0);
        let update = RunUpdate {
            set: w.park(event_type, seen_mailbox_seq),
            tells_parked: true,
        };
        match w.run(self, update).await? {
            None => Err(StoreError::LeaseLost(lease.run_id.clone())),
            Some((_, rows)) if rows.iter().any(|(k, _)| k == "parked") => {
                Ok(SuspendOutcome::Suspended)
            }
            Some(_) => Ok(SuspendOutcome::MailArrived),
        }
    }

    /// A live append to the stream: see [`fathom_engine::store::RunStore::append_stream`].
    pub(crate) async fn write_stream(
        &self,
        lease: &Lease,
        stream: &[Envelope],
    ) -> StoreResult<Option<i64>> {
        if stream.is_empty() {
            return Ok(None);
        }
        let now = fathom_engine::store::now_ms();
        let refs: Vec<&Envelope> = stream.iter().collect();
        let mut w = Write::new(self, lease, now, refs.len());
        w.stream(&refs)?;
        let update = RunUpdate {
            set: String::new(),
            tells_parked: false,
        };
        let Some((first, _)) = w.run(self, update).await? else {
            return Err(StoreError::LeaseLost(lease.run_id.clone()));
        };
        Ok(Some(first + stream.len() as i64 - 1))
    }
}
