-- no-transaction
-- Workers claim the oldest runs first (by creation), no longer the longest idle: under a
-- backlog, runs under way finish before new ones start. Built concurrently, so processes
-- still working on the database meanwhile (a rolling upgrade) are not held up.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_claim_order ON runs (created_at, id) WHERE status = 'running';
