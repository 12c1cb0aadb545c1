-- Readers in a process without a change feed look for changed runs by this column.
CREATE INDEX runs_updated ON runs (updated_at);
