-- Why: as migrations/sqlite V14: newest first is by the event's time, not by when its row
-- arrived (an import of older history came back first). PostgreSQL sorts its matches
-- anyway (GIN gives no order), so it keeps its ids and orders by (created_at, session_id,
-- seq) newest first; this index lets a common word's search walk the newest events and
-- stop at the page instead of sorting every match.
CREATE INDEX session_events_newest ON session_events (created_at, session_id, seq);
