-- The version of the workflow's stored forms (state, step events, journaled results) a run's
-- rows are in. Rows written before versioning are format 1. A process upgrades a run of an
-- older format when it claims it, and leaves a run of a newer format alone.
ALTER TABLE runs ADD COLUMN format BIGINT NOT NULL DEFAULT 1;
