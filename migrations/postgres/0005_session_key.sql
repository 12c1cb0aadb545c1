-- Saved research sessions are found by `research_id`, and the workflow replaces a session's
-- record on every save. The GIN index on `data` does not serve that lookup: the records are
-- large enough to live out of line, the heap looks small, and the planner reads every item,
-- decompressing each one (18 ms a save with 450 sessions, growing with them). This index on
-- the expression the search's equality test compares (by code point, as it does) finds the
-- one item. SQLite has had the same index since 0003.
CREATE INDEX collection_items_research_id
    ON collection_items (deployment_name, collection, ((data #>> '{research_id}') COLLATE "C"));
