-- Saved research sessions are found by `research_id` (the workflow replaces a session's
-- record on every save): an index on that field keeps each lookup from reading every item.
CREATE INDEX collection_items_research_id
    ON collection_items (deployment_name, collection, json_extract(data, '$.research_id'));
