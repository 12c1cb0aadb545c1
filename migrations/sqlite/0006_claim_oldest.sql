-- Workers claim the oldest runs first (by creation), no longer the longest idle: under a
-- backlog, runs under way finish before new ones start. The index claims used before (by
-- updated_at, which every commit of a running run changed) goes; a process older than this
-- still claims in that order, through `runs_updated`.
DROP INDEX IF EXISTS runs_claimable;
CREATE INDEX IF NOT EXISTS runs_claim_order ON runs (created_at, id) WHERE status = 'running';
