-- no-transaction
-- The index claims used before 0006 (by updated_at, which every commit of a running run
-- changed). A process older than 0006 still claims in that order, through `runs_updated`.
DROP INDEX CONCURRENTLY IF EXISTS runs_claimable;
