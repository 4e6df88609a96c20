-- Why: full-text search (SPEC §3), in PostgreSQL's dialect: the same searchable text as
-- the SQLite generated column, stored as a tsvector with a GIN index (SQLite uses FTS5).

ALTER TABLE session_events ADD COLUMN search_text tsvector GENERATED ALWAYS AS (
    to_tsvector('simple', coalesce(
        CASE kind
            WHEN 'user_message'       THEN payload ->> 'text'
            WHEN 'assistant_turn'     THEN payload ->> 'text'
            WHEN 'pending_state'      THEN payload ->> 'text'
            WHEN 'compaction_applied' THEN payload ->> 'summary'
            WHEN 'session_started'    THEN payload ->> 'title'
            WHEN 'session_titled'     THEN payload ->> 'title'
        END, ''))
) STORED;

CREATE INDEX session_search ON session_events USING gin (search_text);
