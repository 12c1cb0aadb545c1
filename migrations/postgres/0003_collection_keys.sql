-- Searches by a field's value (`{"field": {"eq": v}}`, the saved sessions' `research_id`
-- among them) test containment first, which this index serves for any field.
CREATE INDEX collection_items_data ON collection_items USING GIN (data jsonb_path_ops);
