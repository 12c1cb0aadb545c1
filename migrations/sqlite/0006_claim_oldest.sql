-- Workers claim the oldest runs first (by creation), no longer the longest idle: under a
-- backlog, runs under way finish before new ones start. The index the claim used before is
-- replaced; it changed on every commit of a running run, this one only when a run starts or
-- stops running.
DROP INDEX runs_claimable;
CREATE INDEX runs_claimable ON runs (created_at, id) WHERE status = 'running';
