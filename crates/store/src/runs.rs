use std::collections::HashMap;

use async_trait::async_trait;
use fathom_engine::Envelope;
use fathom_engine::store::{
    CLAIM_INBOX_PAGE, CancelOutcome, Claimed, Claims, Committed, DeliverOutcome, Lease,
    MailboxView, NewMessage, NewRun, PendingEvent, RunFilter, RunHead, RunRecord, RunStatus,
    RunStore, RunUpgrade, StepCommit, StoreError, StoreResult, StoredEvent, SuspendOutcome, now_ms,
};
use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::sql::Params;
use crate::{Dialect, SqlStore, db_err, json_err};

const RUN_COLS: &str = "id, workflow, status, state, result, error, waiting_for, next_seq, \
                        mailbox_seq, deadline_at, created_at, updated_at, completed_at, format";

fn run_from_row(row: &AnyRow) -> StoreResult<RunRecord> {
    let status: String = row.try_get("status").map_err(db_err)?;
    let state: String = row.try_get("state").map_err(db_err)?;
    let result: Option<String> = row.try_get("result").map_err(db_err)?;
    Ok(RunRecord {
        id: row.try_get("id").map_err(db_err)?,
        workflow: row.try_get("workflow").map_err(db_err)?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| StoreError::backend(format!("unknown run status '{status}'")))?,
        state: serde_json::from_str(&state).map_err(json_err)?,
        result: result
            .map(|r| serde_json::from_str(&r))
            .transpose()
            .map_err(json_err)?,
        error: row.try_get("error").map_err(db_err)?,
        waiting_for: row.try_get("waiting_for").map_err(db_err)?,
        next_seq: row.try_get("next_seq").map_err(db_err)?,
        mailbox_seq: row.try_get("mailbox_seq").map_err(db_err)?,
        deadline_at: row.try_get("deadline_at").map_err(db_err)?,
        created_at: row.try_get("created_at").map_err(db_err)?,
        updated_at: row.try_get("updated_at").map_err(db_err)?,
        completed_at: row.try_get("completed_at").map_err(db_err)?,
        format: u32::try_from(row.try_get::<i64, _>("format").map_err(db_err)?)
            .map_err(|_| StoreError::backend("run format out of range"))?,
    })
}

/// A run's head: the columns [`head_from_row`] reads, in its order.
const HEAD_COLS: &str = "id, next_seq, status, workflow, waiting_for";

fn head_from_row(row: &AnyRow) -> StoreResult<RunHead> {
    let status: String = row.try_get(2).map_err(db_err)?;
    Ok(RunHead {
        id: row.try_get(0).map_err(db_err)?,
        next_seq: row.try_get(1).map_err(db_err)?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| StoreError::backend(format!("unknown run status '{status}'")))?,
        workflow: row.try_get(3).map_err(db_err)?,
        waiting_for: row.try_get(4).map_err(db_err)?,
    })
}

/// The pending step events a claim read with its run, as a JSON array of
/// `[id, event_type, payload, attempts]` in `pending` (NULL: none).
fn pending_from_json(row: &AnyRow) -> StoreResult<Vec<PendingEvent>> {
    let text: Option<String> = row.try_get("pending").map_err(db_err)?;
    let rows: Vec<(i64, String, String, i64)> = match text {
        Some(t) => serde_json::from_str(&t).map_err(json_err)?,
        None => Vec::new(),
    };
    let mut pending = rows
        .into_iter()
        .map(|(id, event_type, payload, attempts)| {
            Ok(PendingEvent {
                id,
                event_type,
                payload: serde_json::from_str(&payload).map_err(json_err)?,
                attempts,
            })
        })
        .collect::<StoreResult<Vec<_>>>()?;
    pending.sort_by_key(|p| p.id);
    Ok(pending)
}

/// A claimed run's first page of pending step events, as one JSON text column `pending`
/// (read back by [`pending_from_json`]); `run` is the SQL naming the run's id.
fn pending_column(dialect: Dialect, run: &str) -> String {
    let page = format!(
        "(SELECT id, event_type, payload, attempts FROM run_inbox WHERE run_id = {run} \
         AND consumed_at IS NULL ORDER BY id LIMIT {CLAIM_INBOX_PAGE})"
    );
    match dialect {
        Dialect::Postgres => format!(
            "CAST((SELECT json_agg(json_build_array(i.id, i.event_type, i.payload, \
             i.attempts)) FROM {page} i) AS TEXT) AS pending"
        ),
        Dialect::Sqlite => format!(
            "(SELECT json_group_array(json_array(i.id, i.event_type, i.payload, i.attempts)) \
             FROM {page} i) AS pending"
        ),
    }
}

/// The run and lease returned by a claim (`RETURNING {RUN_COLS}, fence`).
fn claimed_row(row: &AnyRow, owner: &str) -> StoreResult<(RunRecord, Lease)> {
    let run = run_from_row(row)?;
    let fence: i64 = row.try_get("fence").map_err(db_err)?;
    let lease = Lease {
        run_id: run.id.clone(),
        owner: owner.to_string(),
        fence,
    };
    Ok((run, lease))
}

fn to_text(v: &impl serde::Serialize) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid(format!("unserializable value: {e}")))
}

/// Tries a Postgres delivery makes before giving up (see `try_deliver`).
const DELIVER_TRIES: usize = 8;

/// What one delivery statement saw and did, read from its rows.
#[derive(Default)]
struct DeliverySeen {
    inserted: Option<i64>,
    /// The run's status, next sequence number and what it waits for (None: no such run).
    run: Option<(String, i64, Option<String>)>,
    /// A message already delivered under the same key.
    keyed: Option<i64>,
    /// For an exclusive message: an earlier one of its type taken (id, status, key).
    earlier: Option<(i64, String, String)>,
}

/// The fragments of a delivery's statement (see `try_deliver`), which
/// [`DeliverSql::statement`] puts together for the dialect. Parameters: `$1` the event type,
/// `$2` now, `$3` the run, `$4` the payload, `$5` the key; claiming, `$6` the owner and `$7`
/// the lease's expiry.
struct DeliverSql {
    /// Whether a message of the type taken before refuses this one.
    exclusive: bool,
    /// The condition on the run's sequence number of a decision sent for a wait.
    at_seq: String,
    /// The earliest message of the type taken (id, status, key).
    earlier: String,
    /// A message delivered under the same key.
    keyed: &'static str,
    /// The `SET` assignments that count the message and wake the run.
    wake: String,
    /// The condition on the run for the message to apply.
    woken: &'static str,
    /// What the runs update returns.
    returning: String,
    /// The claim joined to the row saying the message was stored (Postgres).
    claimed_pg: String,
    /// The statement reading the claim back (SQLite).
    claimed_sqlite: String,
}

impl DeliverSql {
    /// The fragments for `message`, the claiming kind when `claiming`.
    fn new(store: &SqlStore, message: &NewMessage, claiming: bool) -> Self {
        let at_seq = match message.at_seq {
            Some(seq) => format!(" AND next_seq = {seq}"),
            None => String::new(),
        };
        // A decision already waiting to be taken up wins; and one sent while the run is not
        // waiting for it is early only if none was taken up before (else it can only be for
        // the run's next wait: the caller decides whether it is).
        let taken = if message.at_seq.is_some() {
            "'pending'"
        } else {
            "'pending', 'consumed'"
        };
        let earlier = format!(
            "SELECT id, status, idempotency_key FROM mailbox WHERE run_id = $3 \
             AND event_type = $1 AND status IN ({taken}) ORDER BY id LIMIT 1"
        );
        let keyed = "SELECT id FROM mailbox WHERE run_id = $3 AND idempotency_key = $5";
        let mut wake = "mailbox_seq = mailbox_seq + 1, \
             status = CASE WHEN status = 'waiting' AND waiting_for = $1 THEN 'running' ELSE status END, \
             waiting_for = CASE WHEN status = 'waiting' AND waiting_for = $1 THEN NULL ELSE waiting_for END, \
             updated_at = $2"
            .to_string();
        // A decision sent for a wait applies only while that wait is open: the run may have
        // taken up another decision since without streaming anything (a rejection goes
        // straight back to planning), so its sequence number alone does not say.
        let mut woken = if message.at_seq.is_some() {
            "status = 'waiting' AND waiting_for = $1"
        } else {
            "status IN ('running', 'waiting')"
        };
        let mut returning = format!(
            "id, {} AS notice",
            store.work_notice().unwrap_or_else(|| "NULL".into())
        );
        let mut claimed_pg = String::new();
        let mut claimed_sqlite = String::new();
        // The claiming kind applies only to a run waiting for this type, which it wakes and
        // takes; its claim comes back with the run's pending step events (on Postgres joined
        // to the row saying the message was stored).
        if claiming {
            wake.push_str(", lease_owner = $6, lease_expires_at = $7, fence = fence + 1");
            woken = "status = 'waiting' AND waiting_for = $1";
            returning = format!("{RUN_COLS}, fence");
            claimed_pg = format!(
                " LEFT JOIN (SELECT upd.*, {} FROM upd) c ON k.kind = 'inserted'",
                pending_column(store.dialect, "upd.id")
            );
            claimed_sqlite = format!(
                "SELECT 'claimed' AS kind, {RUN_COLS}, fence, {} FROM runs r \
                 WHERE r.id = $3 AND changes() = 1;\n",
                pending_column(store.dialect, "r.id")
            );
        }
        DeliverSql {
            exclusive: message.exclusive,
            at_seq,
            earlier,
            keyed,
            wake,
            woken,
            returning,
            claimed_pg,
            claimed_sqlite,
        }
    }

    /// For an exclusive message, the condition that nothing in `from` (its type taken) is.
    fn unless_taken(&self, from: &str) -> String {
        if self.exclusive {
            format!(" AND NOT EXISTS (SELECT 1 FROM {from})")
        } else {
            String::new()
        }
    }

    /// The delivery's statement for `dialect`: one statement of CTEs on Postgres, a body of
    /// one immediate transaction on SQLite.
    fn statement(&self, dialect: Dialect) -> String {
        let DeliverSql {
            at_seq,
            earlier,
            keyed,
            wake,
            woken,
            returning,
            claimed_pg,
            claimed_sqlite,
            ..
        } = self;
        let insert =
            "INSERT INTO mailbox (run_id, event_type, payload, idempotency_key, received_at)";
        match dialect {
            Dialect::Postgres => format!(
                "WITH cur AS (SELECT mailbox_seq, next_seq, status, waiting_for FROM runs WHERE id = $3), \
                 keyed AS ({keyed}), earlier AS ({earlier}), \
                 upd AS (UPDATE runs SET {wake} WHERE id = $3 AND {woken}{at_seq} \
                   AND mailbox_seq = (SELECT mailbox_seq FROM cur) \
                   AND NOT EXISTS (SELECT 1 FROM keyed){excl} RETURNING {returning}), \
                 ins AS ({insert} SELECT id, $1, $4, $5, $2 FROM upd \
                   ON CONFLICT (run_id, idempotency_key) DO NOTHING RETURNING id) \
                 SELECT * FROM (SELECT 'inserted' AS kind, id AS n, CAST(NULL AS TEXT) AS s, CAST(NULL AS TEXT) AS k FROM ins \
                 UNION ALL SELECT 'run', next_seq, status, waiting_for FROM cur \
                 UNION ALL SELECT 'keyed', id, NULL, NULL FROM keyed \
                 UNION ALL SELECT 'earlier', id, status, idempotency_key FROM earlier) k{claimed_pg}",
                excl = self.unless_taken("earlier"),
            ),
            Dialect::Sqlite => {
                let mut body = format!(
                    "BEGIN IMMEDIATE;\n\
                     UPDATE runs SET {wake} WHERE id = $3 AND {woken}{at_seq} \
                     AND NOT EXISTS ({keyed}){excl};\n\
                     {insert} SELECT $3, $1, $4, $5, $2 WHERE changes() = 1 \
                     RETURNING 'inserted' AS kind, id AS n, NULL AS s, NULL AS k;\n\
                     {claimed_sqlite}\
                     SELECT 'run', next_seq, status, waiting_for FROM runs WHERE id = $3;\n\
                     SELECT 'keyed', id, NULL, NULL FROM mailbox WHERE run_id = $3 AND idempotency_key = $5;\n",
                    excl = self.unless_taken(&format!("({earlier})")),
                );
                if self.exclusive {
                    body.push_str(&format!(
                        "SELECT 'earlier', id, status, idempotency_key FROM ({earlier});\n"
                    ));
                }
                body.push_str("COMMIT");
                body
            }
        }
    }
}

/// Reads what a delivery statement saw and did from its rows, and the claim it made, if
/// any (with `claim`, by `owner`).
fn read_delivery(
    rows: &[AnyRow],
    claim: Option<(&str, i64)>,
) -> StoreResult<(DeliverySeen, Option<Claimed>)> {
    let mut seen = DeliverySeen::default();
    let mut claimed = None;
    for row in rows {
        if let Some((owner, _)) = claim
            && row
                .try_get::<Option<i64>, _>("fence")
                .is_ok_and(|f| f.is_some())
        {
            let (run, lease) = claimed_row(row, owner)?;
            let pending = Some(pending_from_json(row)?);
            claimed = Some(Claimed {
                run,
                lease,
                pending,
            });
        }
        let kind: String = row.try_get(0).map_err(db_err)?;
        if kind == "claimed" {
            continue;
        }
        let n: i64 = row.try_get(1).map_err(db_err)?;
        match kind.as_str() {
            "inserted" => seen.inserted = Some(n),
            "run" => {
                seen.run = Some((
                    row.try_get(2).map_err(db_err)?,
                    n,
                    row.try_get(3).map_err(db_err)?,
                ))
            }
            "keyed" => seen.keyed = Some(n),
            "earlier" => {
                seen.earlier = Some((
                    n,
                    row.try_get(2).map_err(db_err)?,
                    row.try_get(3).map_err(db_err)?,
                ))
            }
            _ => {}
        }
    }
    Ok((seen, claimed))
}

impl SqlStore {
    /// Columns `cols` of run `id`'s row, if it exists.
    async fn run_row(&self, cols: &str, id: &str) -> StoreResult<Option<AnyRow>> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {cols} FROM runs WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.db)
        .await
        .map_err(db_err)
    }

    /// Creates a run with its start event pending, in one round trip: a CTE on Postgres, the
    /// statement after it (inside the transaction) on SQLite. With `claim` (owner, ttl) the
    /// run is created leased to that owner (its first fence), and its lease and start
    /// event's id come back with it.
    async fn insert_run(
        &self,
        run: NewRun,
        claim: Option<(&str, i64)>,
    ) -> StoreResult<(RunRecord, Option<(Lease, i64)>)> {
        let now = now_ms();
        let (lease_cols, lease_vals, returning) = match claim {
            Some(_) => (
                ", lease_owner, lease_expires_at, fence",
                ", $9, $10, 1",
                format!("{RUN_COLS}, fence"),
            ),
            None => ("", "", RUN_COLS.to_string()),
        };
        let insert_run = format!(
            "INSERT INTO runs (id, workflow, status, state, deadline_at, created_at, updated_at, \
             format{lease_cols}) VALUES ($1, $2, 'running', $3, $4, $5, $5, $8{lease_vals}) \
             ON CONFLICT (id) DO NOTHING RETURNING {returning}"
        );
        let insert_start = "INSERT INTO run_inbox (run_id, event_type, payload, created_at)";
        let sql = match self.dialect {
            // A run claimed here needs no other worker told of it.
            Dialect::Postgres => format!(
                "WITH r AS ({insert_run}), i AS ({insert_start} SELECT id, $6, $7, $5 FROM r \
                 RETURNING id) SELECT *, {tail} FROM r",
                tail = match claim {
                    Some(_) => "(SELECT id FROM i) AS start_event".to_string(),
                    None => self.work_notice().unwrap_or_default(),
                }
            ),
            Dialect::Sqlite => format!(
                "BEGIN IMMEDIATE;\n{insert_run};\n{insert_start} SELECT $1, $6, $7, $5 \
                 WHERE changes() = 1 RETURNING id AS start_event;\nCOMMIT"
            ),
        };
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&run.id)
            .bind(&run.workflow)
            .bind(to_text(&run.state)?)
            .bind(run.deadline_at)
            .bind(now)
            .bind(&run.start_type)
            .bind(to_text(&run.start_payload)?)
            .bind(i64::from(run.format));
        if let Some((owner, ttl_ms)) = claim {
            query = query.bind(owner).bind(now + ttl_ms);
        }
        let rows = self.fetch_write(query).await?;
        let Some(row) = rows.iter().find(|r| r.try_column("workflow").is_ok()) else {
            return Err(StoreError::Conflict(format!(
                "run {} already exists",
                run.id
            )));
        };
        self.count_commit();
        let Some((owner, _)) = claim else {
            return Ok((run_from_row(row)?, None));
        };
        let (created, lease) = claimed_row(row, owner)?;
        let start_event = rows
            .iter()
            .find_map(|r| r.try_get::<i64, _>("start_event").ok())
            .ok_or_else(|| StoreError::backend(format!("run {} has no start event", run.id)))?;
        Ok((created, Some((lease, start_event))))
    }

    /// One delivery in one round trip (see [`RunStore::deliver`]); with `claim` (owner, ttl),
    /// the claiming kind (see [`RunStore::deliver_claiming`]). The run is woken and the
    /// message stored only if no message has the same key and, for an exclusive one, none of
    /// its type was taken; the statement also reads what decides the outcome otherwise. On
    /// SQLite it runs as one immediate transaction. On Postgres its reads share a snapshot,
    /// so the run is updated only if its mailbox counter is still the one read: a delivery
    /// committed meanwhile makes this one apply nothing, and None says to try again.
    async fn try_deliver(
        &self,
        run_id: &str,
        message: &NewMessage,
        claim: Option<(&str, i64)>,
    ) -> StoreResult<Option<(DeliverOutcome, Option<Claimed>)>> {
        let now = now_ms();
        // No key: every delivery is distinct.
        let key = message
            .idempotency_key
            .clone()
            .unwrap_or_else(|| format!("auto:{}", uuid::Uuid::new_v4().simple()));
        let sql = DeliverSql::new(self, message, claim.is_some()).statement(self.dialect);
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&message.event_type)
            .bind(now)
            .bind(run_id)
            .bind(to_text(&message.payload)?)
            .bind(&key);
        if let Some((owner, ttl_ms)) = claim {
            query = query.bind(owner).bind(now + ttl_ms);
        }
        let rows = self.fetch_write(query).await?;
        let (seen, claimed) = read_delivery(&rows, claim)?;
        if let Some(id) = seen.inserted {
            self.count_commit();
            return Ok(Some((DeliverOutcome::Accepted { message_id: id }, claimed)));
        }
        if claim.is_some() {
            // Not waiting for it, or refused: the ordinary delivery says why.
            return Ok(None);
        }
        let refused = self.refused_delivery(run_id, message, seen)?;
        Ok(refused.map(|outcome| (outcome, None)))
    }

    /// Why an ordinary delivery stored nothing, from what its statement saw: an outcome, a
    /// typed refusal, or None (Postgres) when another delivery committed meanwhile.
    fn refused_delivery(
        &self,
        run_id: &str,
        message: &NewMessage,
        seen: DeliverySeen,
    ) -> StoreResult<Option<DeliverOutcome>> {
        // A delivery made already is a duplicate, whatever the run has done since.
        if let Some(id) = seen.keyed {
            return Ok(Some(DeliverOutcome::Duplicate { message_id: id }));
        }
        let Some((status, next_seq, waiting_for)) = seen.run else {
            return Ok(Some(DeliverOutcome::RunNotFound));
        };
        let status = RunStatus::parse(&status)
            .ok_or_else(|| StoreError::backend(format!("unknown run status '{status}'")))?;
        if status.is_terminal() {
            return Ok(Some(DeliverOutcome::RunTerminal(status)));
        }
        if let Some((_, earlier_status, _)) = seen.earlier {
            if earlier_status != "pending" {
                return Ok(Some(DeliverOutcome::BetweenWaits));
            }
            return Err(StoreError::Conflict(format!(
                "another {} for this run was received first and is being taken up",
                message.event_type
            )));
        }
        let wait_open = status == RunStatus::Waiting
            && waiting_for.as_deref() == Some(message.event_type.as_str())
            && message.at_seq == Some(next_seq);
        if message.at_seq.is_some() && !(wait_open && self.dialect == Dialect::Postgres) {
            return Err(StoreError::Conflict(format!(
                "the run has moved on since this {} was sent (another was taken up); \
                 read its state and decide again",
                message.event_type
            )));
        }
        match self.dialect {
            // Its snapshot said it would apply: another delivery committed meanwhile.
            Dialect::Postgres => Ok(None),
            Dialect::Sqlite => Err(StoreError::backend(format!(
                "a {} for run {run_id} was neither stored nor refused",
                message.event_type
            ))),
        }
    }

    /// Claims up to `wanted` runs for `owner` in one round trip (free ones, or with `expired`
    /// those whose lease ran out) and returns the statement's rows.
    async fn claim_rows(
        &self,
        owner: &str,
        ttl_ms: i64,
        exclude: &[String],
        workflows: &[String],
        wanted: usize,
        expired: bool,
    ) -> StoreResult<Vec<AnyRow>> {
        let now = now_ms();
        let mut p = Params::default();
        let owner_p = p.text(owner);
        let expires = p.int(now + ttl_ms);
        let claimable = claimable_runs(&mut p, now, expired, exclude, workflows);
        let limit = p.count(self.dialect, wanted as i64);
        // Oldest run first: under a backlog, runs already under way (approved, woken by mail)
        // finish before new ones start, so what a user is waiting on is not queued behind
        // runs that have shown nothing yet.
        let candidates = format!("{claimable} ORDER BY created_at, id LIMIT {limit}");
        let set = format!(
            "UPDATE runs SET lease_owner = {owner_p}, lease_expires_at = {expires}, fence = fence + 1"
        );
        // A free run's step inbox changes only under a lease (and when it is created), so its
        // pending events are read with the claim. A run taken over may see its old holder's
        // last commit land meanwhile: its inbox is read afterwards, by its driver.
        let with_inbox = !expired;
        let rows = match self.dialect {
            // Materialized, so the candidates are picked (and locked) once: as a subquery of
            // the UPDATE, Postgres may run it again per row and take more than `limit`.
            Dialect::Postgres => {
                let claim = format!(
                    "WITH c (claimed_id) AS MATERIALIZED ({candidates} FOR UPDATE SKIP LOCKED), \
                     u AS ({set} FROM c WHERE id = c.claimed_id RETURNING {RUN_COLS}, fence)"
                );
                // Read before the claim (one snapshot): more than the limit were claimable.
                // Runs other workers hold locked count too: at worst one look too many.
                let more = format!(
                    "CAST(CASE WHEN (SELECT count(*) FROM ({claimable} LIMIT {limit} + 1) m) \
                     > {limit} THEN 1 ELSE 0 END AS BIGINT) AS more"
                );
                let sql = if with_inbox {
                    format!(
                        "{claim} SELECT u.*, {}, {more} FROM u",
                        pending_column(self.dialect, "u.id")
                    )
                } else {
                    format!("{claim} SELECT *, {more} FROM u")
                };
                p.query(sql).fetch_all(&self.db).await.map_err(db_err)?
            }
            Dialect::Sqlite => {
                let claim = format!("{set} WHERE id IN ({candidates}) RETURNING {RUN_COLS}, fence");
                if with_inbox {
                    // One immediate transaction: the claim, then the claimed runs' inboxes,
                    // then whether claimable runs are left.
                    let sql = format!(
                        "BEGIN IMMEDIATE;\n{claim};\nSELECT r.id AS claimed, {} FROM runs r \
                         WHERE r.lease_owner = {owner_p} AND r.lease_expires_at = {expires} \
                         AND r.status = 'running';\n\
                         SELECT CAST(EXISTS ({claimable}) AS BIGINT) AS more;\nCOMMIT",
                        pending_column(self.dialect, "r.id")
                    );
                    self.run_body(p.query(sql), db_err).await?
                } else {
                    let _turn = self.write_turn().await;
                    p.query(claim).fetch_all(&self.db).await.map_err(db_err)?
                }
            }
        };
        Ok(rows)
    }
}

/// The `SELECT id` of the runs a claim may take: running, free (or with `expired`, leased
/// until before `now`), not in `exclude`, and of one of `workflows` when any are named.
fn claimable_runs(
    p: &mut Params,
    now: i64,
    expired: bool,
    exclude: &[String],
    workflows: &[String],
) -> String {
    let held = if expired {
        format!(
            "lease_owner IS NOT NULL AND lease_expires_at < {}",
            p.int(now)
        )
    } else {
        "lease_owner IS NULL".to_string()
    };
    let mut claimable = format!("SELECT id FROM runs WHERE status = 'running' AND {held}");
    if !exclude.is_empty() {
        let ph: Vec<String> = exclude.iter().map(|id| p.text(id.clone())).collect();
        claimable.push_str(&format!(" AND id NOT IN ({})", ph.join(", ")));
    }
    if !workflows.is_empty() {
        let ph: Vec<String> = workflows.iter().map(|w| p.text(w.clone())).collect();
        claimable.push_str(&format!(" AND workflow IN ({})", ph.join(", ")));
    }
    claimable
}

/// What a claim's rows say: the runs claimed, their pending step events when read with
/// them, and whether claimable runs are left when the statement told.
struct ClaimRows {
    claimed: Vec<(RunRecord, Lease)>,
    inboxes: HashMap<String, Vec<PendingEvent>>,
    more: Option<bool>,
}

impl ClaimRows {
    /// Reads the rows of a claim by `owner`.
    fn read(rows: &[AnyRow], owner: &str) -> StoreResult<Self> {
        let mut claimed = Vec::new();
        let mut inboxes: HashMap<String, Vec<PendingEvent>> = HashMap::new();
        // Told by the query where it can (the claim with inboxes); else whenever the limit
        // was reached.
        let mut more = None;
        for row in rows {
            if row.try_column("more").is_ok() {
                let left: i64 = row.try_get("more").map_err(db_err)?;
                more = Some(left != 0);
                if row.columns().len() == 1 {
                    continue;
                }
            }
            if row.try_column("claimed").is_ok() {
                let id: String = row.try_get("claimed").map_err(db_err)?;
                inboxes.insert(id, pending_from_json(row)?);
                continue;
            }
            let (run, lease) = claimed_row(row, owner)?;
            if row.try_column("pending").is_ok() {
                inboxes.insert(run.id.clone(), pending_from_json(row)?);
            }
            claimed.push((run, lease));
        }
        Ok(ClaimRows {
            claimed,
            inboxes,
            more,
        })
    }

    /// The claims with their inboxes, oldest run first.
    fn oldest_first(mut self) -> Vec<Claimed> {
        self.claimed
            .sort_by(|(a, _), (b, _)| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        self.claimed
            .into_iter()
            .map(|(run, lease)| Claimed {
                pending: self.inboxes.remove(&run.id),
                run,
                lease,
            })
            .collect()
    }
}

async fn status_of(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    id: &str,
) -> StoreResult<Option<RunStatus>> {
    let row = sqlx::query("SELECT status FROM runs WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_err)?;
    row.map(|r| {
        let s: String = r.try_get(0).map_err(db_err)?;
        RunStatus::parse(&s).ok_or_else(|| StoreError::backend(format!("unknown run status '{s}'")))
    })
    .transpose()
}

/// Rows of at most this many parameters go into one multi-row INSERT.
const INSERT_CHUNK: usize = 200;

/// The journaled result of a call, if any.
pub(crate) async fn journal_result<'e>(
    db: impl sqlx::Executor<'e, Database = sqlx::Any>,
    run_id: &str,
    scope: i64,
    key: &str,
) -> StoreResult<Option<Value>> {
    let row = sqlx::query(
        "SELECT result FROM call_journal WHERE run_id = $1 AND scope = $2 AND key = $3",
    )
    .bind(run_id)
    .bind(scope)
    .bind(key)
    .fetch_optional(db)
    .await
    .map_err(db_err)?;
    let Some(row) = row else { return Ok(None) };
    let text: String = row.try_get(0).map_err(db_err)?;
    Ok(Some(serde_json::from_str(&text).map_err(json_err)?))
}

/// Writes `stream` from `first_seq` on; returns the last sequence number written. On
/// Postgres, announces the change to listeners in other processes when the transaction
/// commits.
async fn insert_events(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    store: &SqlStore,
    run_id: &str,
    first_seq: i64,
    stream: &[Envelope],
    now: i64,
) -> StoreResult<Option<i64>> {
    if store.dialect == Dialect::Postgres && !stream.is_empty() {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(crate::CHANGES_CHANNEL)
            .bind(store.change_notice(run_id))
            .execute(&mut **tx)
            .await
            .map_err(db_err)?;
    }
    insert_rows(
        tx,
        "run_events (run_id, seq, event_type, envelope, created_at)",
        stream,
        |p, i, env| {
            Ok(format!(
                "({}, {}, {}, {}, {})",
                p.text(run_id.to_string()),
                p.int(first_seq + i as i64),
                p.text(env.event_type.clone()),
                p.text(to_text(env)?),
                p.int(now)
            ))
        },
    )
    .await?;
    Ok((!stream.is_empty()).then(|| first_seq + stream.len() as i64 - 1))
}

/// Inserts `rows` into `into` (`"table (col, ...)"`), `INSERT_CHUNK` rows per statement;
/// `tuple` binds row `i`'s values and returns its placeholder tuple.
async fn insert_rows<T>(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    into: &str,
    rows: &[T],
    mut tuple: impl FnMut(&mut Params, usize, &T) -> StoreResult<String>,
) -> StoreResult<()> {
    for (chunk_idx, chunk) in rows.chunks(INSERT_CHUNK).enumerate() {
        let mut p = Params::default();
        let mut tuples = Vec::with_capacity(chunk.len());
        for (i, row) in chunk.iter().enumerate() {
            tuples.push(tuple(&mut p, chunk_idx * INSERT_CHUNK + i, row)?);
        }
        let sql = format!("INSERT INTO {into} VALUES {}", tuples.join(", "));
        p.query(sql).execute(&mut **tx).await.map_err(db_err)?;
    }
    Ok(())
}

#[async_trait]
impl RunStore for SqlStore {
    async fn create_run(&self, run: NewRun) -> StoreResult<RunRecord> {
        let (run, _) = self.insert_run(run, None).await?;
        Ok(run)
    }

    async fn create_claimed(&self, run: NewRun, owner: &str, ttl_ms: i64) -> StoreResult<Claimed> {
        let (start_type, start_payload) = (run.start_type.clone(), run.start_payload.clone());
        let (run, claim) = self.insert_run(run, Some((owner, ttl_ms))).await?;
        let Some((lease, start_event)) = claim else {
            return Err(StoreError::backend(format!(
                "run {} was created without its lease",
                run.id
            )));
        };
        Ok(Claimed {
            run,
            lease,
            pending: Some(vec![PendingEvent {
                id: start_event,
                event_type: start_type,
                payload: start_payload,
                attempts: 0,
            }]),
        })
    }

    async fn get_run(&self, id: &str) -> StoreResult<Option<RunRecord>> {
        let row = self.run_row(RUN_COLS, id).await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn count_active_runs(&self) -> StoreResult<Vec<(String, RunStatus, i64)>> {
        let rows = sqlx::query(
            "SELECT workflow, status, COUNT(*) AS n FROM runs \
             WHERE status IN ('running', 'waiting') GROUP BY workflow, status",
        )
        .fetch_all(&self.db)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                let workflow: String = r.try_get("workflow").map_err(db_err)?;
                let status: String = r.try_get("status").map_err(db_err)?;
                let n: i64 = r.try_get("n").map_err(db_err)?;
                let status = RunStatus::parse(&status)
                    .ok_or_else(|| StoreError::Invalid(format!("unknown run status '{status}'")))?;
                Ok((workflow, status, n))
            })
            .collect()
    }

    async fn list_runs(&self, filter: &RunFilter) -> StoreResult<Vec<RunRecord>> {
        let mut p = Params::default();
        let mut sql = format!("SELECT {RUN_COLS} FROM runs WHERE 1 = 1");
        if !filter.workflows.is_empty() {
            let ph: Vec<String> = filter.workflows.iter().map(|w| p.text(w.clone())).collect();
            sql.push_str(&format!(" AND workflow IN ({})", ph.join(", ")));
        }
        if !filter.statuses.is_empty() {
            let ph: Vec<String> = filter.statuses.iter().map(|s| p.text(s.as_str())).collect();
            sql.push_str(&format!(" AND status IN ({})", ph.join(", ")));
        }
        let limit = p.count(self.dialect, filter.limit.unwrap_or(1000).clamp(1, 10_000));
        sql.push_str(&format!(" ORDER BY created_at DESC, id LIMIT {limit}"));
        let rows = p.query(sql).fetch_all(&self.db).await.map_err(db_err)?;
        rows.iter().map(run_from_row).collect()
    }

    async fn delete_run(&self, id: &str) -> StoreResult<bool> {
        let (mut tx, _turn) = self.begin_write().await?;
        // The run's row first: a commit writing to the run holds it, so this waits for that
        // commit, and no later write finds the run. Then its rows (on Postgres nothing
        // deletes them with it, see migration 0008), the committed ones included.
        let done = sqlx::query("DELETE FROM runs WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        for table in [
            "run_inbox",
            "step_journal",
            "call_journal",
            "run_events",
            "mailbox",
        ] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE run_id = $1"
            )))
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
        self.commit(tx).await?;
        Ok(done.rows_affected() > 0)
    }

    async fn claim_runs(
        &self,
        owner: &str,
        ttl_ms: i64,
        exclude: &[String],
        workflows: &[String],
        limit: usize,
        expired: bool,
    ) -> StoreResult<Claims> {
        self.stats()
            .claim_looks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let wanted = limit.clamp(1, 1_000);
        let rows = self
            .claim_rows(owner, ttl_ms, exclude, workflows, wanted, expired)
            .await?;
        let read = ClaimRows::read(&rows, owner)?;
        if read.claimed.is_empty() {
            return Ok(Claims::default());
        }
        let more = read.more.unwrap_or(read.claimed.len() == wanted);
        self.count_commit();
        if expired {
            metrics::counter!("fathom_lease_takeovers_total").increment(read.claimed.len() as u64);
        }
        Ok(Claims {
            runs: read.oldest_first(),
            more,
        })
    }

    async fn claim_run(
        &self,
        id: &str,
        owner: &str,
        ttl_ms: i64,
    ) -> StoreResult<Option<(RunRecord, Lease)>> {
        let _turn = self.write_turn().await;
        let now = now_ms();
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE runs SET lease_owner = $1, lease_expires_at = $2, fence = fence + 1 \
             WHERE id = $3 AND status = 'running' AND (lease_owner IS NULL OR lease_expires_at < $4) \
             RETURNING {RUN_COLS}, fence"
        )))
        .bind(owner)
        .bind(now + ttl_ms)
        .bind(id)
        .bind(now)
        .fetch_optional(&self.db)
        .await
        .map_err(db_err)?;
        let Some(row) = row else { return Ok(None) };
        self.count_commit();
        claimed_row(&row, owner).map(Some)
    }

    async fn renew_lease(&self, lease: &Lease, ttl_ms: i64) -> StoreResult<bool> {
        let _turn = self.write_turn().await;
        let done = sqlx::query(
            "UPDATE runs SET lease_expires_at = $1 \
             WHERE id = $2 AND lease_owner = $3 AND fence = $4 AND status = 'running'",
        )
        .bind(now_ms() + ttl_ms)
        .bind(&lease.run_id)
        .bind(&lease.owner)
        .bind(lease.fence)
        .execute(&self.db)
        .await
        .map_err(db_err)?;
        self.count_commit();
        Ok(done.rows_affected() == 1)
    }

    async fn release_lease(&self, lease: &Lease) -> StoreResult<()> {
        let _turn = self.write_turn().await;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $1 AND lease_owner = $2 AND fence = $3{}",
            self.returning_work_notice()
        )))
        .bind(&lease.run_id)
        .bind(&lease.owner)
        .bind(lease.fence)
        .execute(&self.db)
        .await
        .map_err(db_err)?;
        self.count_commit();
        Ok(())
    }

    async fn release_owner(&self, owner: &str) -> StoreResult<u64> {
        let _turn = self.write_turn().await;
        let done = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, fence = fence + 1 \
             WHERE lease_owner = $1{}",
            self.returning_work_notice()
        )))
        .bind(owner)
        .execute(&self.db)
        .await
        .map_err(db_err)?;
        self.count_commit();
        Ok(done.rows_affected())
    }

    async fn pending_events(&self, run_id: &str, limit: i64) -> StoreResult<Vec<PendingEvent>> {
        let mut p = Params::default();
        let run = p.text(run_id);
        let limit = p.count(self.dialect, limit.clamp(1, 10_000));
        let rows = p
            .query(format!(
                "SELECT id, event_type, payload, attempts FROM run_inbox \
                 WHERE run_id = {run} AND consumed_at IS NULL ORDER BY id LIMIT {limit}"
            ))
            .fetch_all(&self.db)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|row| {
                let payload: String = row.try_get(2).map_err(db_err)?;
                Ok(PendingEvent {
                    id: row.try_get(0).map_err(db_err)?,
                    event_type: row.try_get(1).map_err(db_err)?,
                    payload: serde_json::from_str(&payload).map_err(json_err)?,
                    attempts: row.try_get(3).map_err(db_err)?,
                })
            })
            .collect()
    }

    async fn record_attempt_failure(
        &self,
        lease: &Lease,
        pending_id: i64,
        error: &str,
    ) -> StoreResult<()> {
        let _turn = self.write_turn().await;
        let done = sqlx::query(
            "UPDATE run_inbox SET attempts = attempts + 1, last_error = $1 \
             WHERE id = $2 AND run_id = $3 AND consumed_at IS NULL AND EXISTS \
             (SELECT 1 FROM runs WHERE id = $3 AND lease_owner = $4 AND fence = $5 AND status = 'running')",
        )
        .bind(error)
        .bind(pending_id)
        .bind(&lease.run_id)
        .bind(&lease.owner)
        .bind(lease.fence)
        .execute(&self.db)
        .await
        .map_err(db_err)?;
        self.count_commit();
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(StoreError::LeaseLost(lease.run_id.clone()))
        }
    }

    async fn commit_step(&self, lease: &Lease, commit: &StepCommit) -> StoreResult<Committed> {
        self.write_step(lease, commit).await
    }

    async fn suspend(
        &self,
        lease: &Lease,
        event_type: &str,
        seen_mailbox_seq: i64,
    ) -> StoreResult<SuspendOutcome> {
        self.write_park(lease, event_type, seen_mailbox_seq).await
    }

    async fn journal_get(&self, run_id: &str, scope: i64, key: &str) -> StoreResult<Option<Value>> {
        journal_result(&self.db, run_id, scope, key).await
    }

    async fn journal_entries(
        &self,
        run_id: &str,
        scopes: &[i64],
    ) -> StoreResult<Vec<(i64, String, Value)>> {
        if scopes.is_empty() {
            return Ok(Vec::new());
        }
        // Integers only, so inlined.
        let list = scopes
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT scope, key, result FROM call_journal WHERE run_id = $1 AND scope IN ({list}) \
             ORDER BY scope, created_at"
        )))
        .bind(run_id)
        .fetch_all(&self.db)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|row| {
                let text: String = row.try_get(2).map_err(db_err)?;
                Ok((
                    row.try_get(0).map_err(db_err)?,
                    row.try_get(1).map_err(db_err)?,
                    serde_json::from_str(&text).map_err(json_err)?,
                ))
            })
            .collect()
    }

    async fn upgrade_run(&self, lease: &Lease, upgrade: &RunUpgrade) -> StoreResult<()> {
        let (mut tx, _turn) = self.begin_write().await?;
        let fenced = sqlx::query(
            "UPDATE runs SET state = $1, format = $2 \
             WHERE id = $3 AND lease_owner = $4 AND fence = $5 AND status = 'running'",
        )
        .bind(to_text(&upgrade.state)?)
        .bind(i64::from(upgrade.format))
        .bind(&lease.run_id)
        .bind(&lease.owner)
        .bind(lease.fence)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        if fenced.rows_affected() != 1 {
            tx.rollback().await.map_err(db_err)?;
            return Err(StoreError::LeaseLost(lease.run_id.clone()));
        }
        for (id, payload) in &upgrade.inbox {
            sqlx::query("UPDATE run_inbox SET payload = $1 WHERE id = $2 AND run_id = $3")
                .bind(to_text(payload)?)
                .bind(*id)
                .bind(&lease.run_id)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        for (scope, key, result) in &upgrade.journal {
            sqlx::query(
                "UPDATE call_journal SET result = $1 WHERE run_id = $2 AND scope = $3 AND key = $4",
            )
            .bind(to_text(result)?)
            .bind(&lease.run_id)
            .bind(*scope)
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
        self.commit(tx).await
    }

    async fn journal_put(
        &self,
        lease: &Lease,
        scope: i64,
        key: &str,
        value: &Value,
        stream: &[Envelope],
    ) -> StoreResult<(Value, Option<i64>)> {
        self.write_call(lease, scope, key, value, stream).await
    }

    async fn append_stream(&self, lease: &Lease, stream: &[Envelope]) -> StoreResult<Option<i64>> {
        self.write_stream(lease, stream).await
    }

    async fn deliver(&self, run_id: &str, message: NewMessage) -> StoreResult<DeliverOutcome> {
        // Bounded: on Postgres a delivery that lost a race to another one touching the run at
        // the same moment looks again; each try is one round trip.
        for _ in 0..DELIVER_TRIES {
            if let Some((outcome, _)) = self.try_deliver(run_id, &message, None).await? {
                return Ok(outcome);
            }
        }
        Err(StoreError::Conflict(format!(
            "run {run_id} is changing too fast to take this {}; send it again",
            message.event_type
        )))
    }

    async fn deliver_claiming(
        &self,
        run_id: &str,
        message: &NewMessage,
        owner: &str,
        ttl_ms: i64,
    ) -> StoreResult<Option<(i64, Claimed)>> {
        match self
            .try_deliver(run_id, message, Some((owner, ttl_ms)))
            .await?
        {
            Some((DeliverOutcome::Accepted { message_id }, Some(claimed))) => {
                Ok(Some((message_id, claimed)))
            }
            Some((DeliverOutcome::Accepted { message_id }, None)) => Err(StoreError::backend(
                format!("message {message_id} to run {run_id} was stored without its claim"),
            )),
            _ => Ok(None),
        }
    }

    async fn delivered_with_key(&self, run_id: &str, key: &str) -> StoreResult<Option<i64>> {
        sqlx::query_scalar("SELECT id FROM mailbox WHERE run_id = $1 AND idempotency_key = $2")
            .bind(run_id)
            .bind(key)
            .fetch_optional(&self.db)
            .await
            .map_err(db_err)
    }

    async fn mailbox_peek(&self, run_id: &str, event_type: &str) -> StoreResult<MailboxView> {
        // One statement reads the counter and the oldest message from one snapshot: a
        // message that lands later moves the counter, so a suspend based on this view
        // cannot miss it.
        let row = sqlx::query(
            "SELECT r.mailbox_seq, m.id, m.payload FROM runs r LEFT JOIN mailbox m ON m.id = \
             (SELECT id FROM mailbox WHERE run_id = $1 AND event_type = $2 AND status = 'pending' \
              ORDER BY id LIMIT 1) WHERE r.id = $1",
        )
        .bind(run_id)
        .bind(event_type)
        .fetch_optional(&self.db)
        .await
        .map_err(db_err)?
        .ok_or_else(|| StoreError::NotFound(format!("run {run_id}")))?;
        let mailbox_seq: i64 = row.try_get(0).map_err(db_err)?;
        let id: Option<i64> = row.try_get(1).map_err(db_err)?;
        let payload: Option<String> = row.try_get(2).map_err(db_err)?;
        let message = match (id, payload) {
            (Some(id), Some(payload)) => {
                Some((id, serde_json::from_str(&payload).map_err(json_err)?))
            }
            _ => None,
        };
        Ok(MailboxView {
            message,
            mailbox_seq,
        })
    }

    async fn events_after(
        &self,
        run_id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<StoredEvent>> {
        let mut p = Params::default();
        let run = p.text(run_id);
        let after = p.int(after);
        let limit = p.count(self.dialect, limit.clamp(1, 100_000));
        self.stats()
            .stream_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rows = p
            .query(format!(
                "SELECT seq, envelope, created_at FROM run_events WHERE run_id = {run} \
                 AND seq > {after} ORDER BY seq LIMIT {limit}"
            ))
            .fetch_all(&self.db)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|row| {
                let text: String = row.try_get(1).map_err(db_err)?;
                let envelope: Envelope = serde_json::from_str(&text).map_err(json_err)?;
                Ok(StoredEvent {
                    seq: row.try_get(0).map_err(db_err)?,
                    envelope,
                    created_at: row.try_get(2).map_err(db_err)?,
                })
            })
            .collect()
    }

    async fn run_head(&self, id: &str) -> StoreResult<Option<RunHead>> {
        let row = self.run_row(HEAD_COLS, id).await?;
        row.as_ref().map(head_from_row).transpose()
    }

    async fn changed_since(&self, since_ms: i64, limit: i64) -> StoreResult<Vec<RunHead>> {
        let mut p = Params::default();
        let since = p.int(since_ms);
        let limit = p.count(self.dialect, limit.clamp(1, 100_000));
        let rows = p
            .query(format!(
                "SELECT {HEAD_COLS} FROM runs WHERE updated_at >= {since} \
                 ORDER BY updated_at LIMIT {limit}"
            ))
            .fetch_all(&self.db)
            .await
            .map_err(db_err)?;
        rows.iter().map(head_from_row).collect()
    }

    async fn cancel_run(&self, id: &str, cancelled: Envelope) -> StoreResult<CancelOutcome> {
        let (mut tx, _turn) = self.begin_write().await?;
        // Stamped once the write is ours: a stamp taken before a wait for the lock would
        // fall behind what other processes' pollers look back for.
        let now = now_ms();
        let row = sqlx::query(
            "UPDATE runs SET status = 'cancelled', waiting_for = NULL, lease_owner = NULL, \
             lease_expires_at = NULL, fence = fence + 1, next_seq = next_seq + 1, \
             updated_at = $1, completed_at = $1 \
             WHERE id = $2 AND status IN ('running', 'waiting') RETURNING next_seq",
        )
        .bind(now)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_err)?;
        let Some(row) = row else {
            let status = status_of(&mut tx, id).await?;
            tx.rollback().await.map_err(db_err)?;
            return Ok(match status {
                None => CancelOutcome::NotFound,
                Some(s) => CancelOutcome::AlreadyTerminal(s),
            });
        };
        let next_seq: i64 = row.try_get(0).map_err(db_err)?;
        insert_events(
            &mut tx,
            self,
            id,
            next_seq - 1,
            std::slice::from_ref(&cancelled),
            now,
        )
        .await?;
        self.commit(tx).await?;
        Ok(CancelOutcome::Cancelled)
    }
}
