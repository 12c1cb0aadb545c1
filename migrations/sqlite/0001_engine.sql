-- Fathom engine schema (SQLite). Timestamps are milliseconds since the Unix epoch.
-- JSON blobs the engine reads whole are TEXT; collection data is TEXT  so filters run in SQL.

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    workflow         TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('running','waiting','completed','failed','cancelled')),
    state            TEXT    NOT NULL,
    result           TEXT,
    error            TEXT,
    waiting_for      TEXT,
    next_seq         BIGINT  NOT NULL DEFAULT 0,
    mailbox_seq      BIGINT  NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    fence            BIGINT  NOT NULL DEFAULT 0,
    deadline_at      BIGINT,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    completed_at     BIGINT
);
CREATE INDEX runs_claimable ON runs (updated_at) WHERE status = 'running';
CREATE INDEX runs_owner ON runs (lease_owner) WHERE lease_owner IS NOT NULL;
CREATE INDEX runs_workflow_status ON runs (workflow, status);

-- Events sent to steps; a row is consumed by the commit of the step that handled it.
CREATE TABLE run_inbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT   NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    event_type  TEXT   NOT NULL,
    payload     TEXT   NOT NULL,
    attempts    BIGINT NOT NULL DEFAULT 0,
    last_error  TEXT,
    created_at  BIGINT NOT NULL,
    consumed_at BIGINT
);
CREATE INDEX run_inbox_pending ON run_inbox (run_id, id) WHERE consumed_at IS NULL;

-- One record per committed step.
CREATE TABLE step_journal (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT   NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    inbox_id    BIGINT,
    step        TEXT   NOT NULL,
    attempt     BIGINT NOT NULL,
    outcome     TEXT   NOT NULL,
    started_at  BIGINT NOT NULL,
    finished_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX step_journal_once ON step_journal (run_id, inbox_id) WHERE inbox_id IS NOT NULL;

-- Results of journaled side-effect calls, by step invocation (inbox id) and key.
CREATE TABLE call_journal (
    run_id     TEXT   NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    scope      BIGINT NOT NULL,
    key        TEXT   NOT NULL,
    result     TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, scope, key)
);

-- The stream: gap-free per-run sequence numbers from 0.
CREATE TABLE run_events (
    run_id     TEXT   NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    event_type TEXT   NOT NULL,
    envelope   TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- External events waiting to be consumed by a step.
CREATE TABLE mailbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id          TEXT   NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    event_type      TEXT   NOT NULL,
    payload         TEXT   NOT NULL,
    idempotency_key TEXT   NOT NULL,
    status          TEXT   NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','consumed','superseded')),
    received_at     BIGINT NOT NULL,
    consumed_at     BIGINT,
    consumed_by     BIGINT,
    UNIQUE (run_id, idempotency_key)
);
CREATE INDEX mailbox_pending ON mailbox (run_id, event_type, id) WHERE status = 'pending';

-- Agent Data items.
CREATE TABLE collection_items (
    id              TEXT PRIMARY KEY,
    deployment_name TEXT   NOT NULL,
    collection      TEXT   NOT NULL,
    data            TEXT   NOT NULL,
    project_id      TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX collection_items_scope ON collection_items (deployment_name, collection, created_at);

-- Content-addressed blobs.
CREATE TABLE artifacts (
    file_id      TEXT PRIMARY KEY,
    content_type TEXT   NOT NULL,
    size         BIGINT NOT NULL,
    bytes        BLOB   NOT NULL,
    created_at   BIGINT NOT NULL
);
