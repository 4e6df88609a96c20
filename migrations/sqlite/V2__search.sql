-- Why: full-text search over user and assistant text (completed and interrupted),
-- compaction summaries and titles (SPEC §3). The searchable text is a virtual generated
-- column, so the FTS5 index can use session_events as its external content (no second
-- copy of the text) and snippet() still works.

ALTER TABLE session_events ADD COLUMN search_text TEXT GENERATED ALWAYS AS (
    CASE kind
        WHEN 'user_message'       THEN json_extract(payload, '$.text')
        WHEN 'assistant_turn'     THEN json_extract(payload, '$.text')
        WHEN 'pending_state'      THEN json_extract(payload, '$.text')
        WHEN 'compaction_applied' THEN json_extract(payload, '$.summary')
        WHEN 'session_started'    THEN json_extract(payload, '$.title')
        WHEN 'session_titled'     THEN json_extract(payload, '$.title')
    END
) VIRTUAL;

CREATE VIRTUAL TABLE session_search USING fts5 (
    search_text,
    content = 'session_events',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER session_search_insert AFTER INSERT ON session_events
WHEN new.search_text IS NOT NULL
BEGIN
    INSERT INTO session_search (rowid, search_text) VALUES (new.id, new.search_text);
END;

-- Deleting a whole session (the only removal I1 allows) takes its index rows with it.
CREATE TRIGGER session_search_delete AFTER DELETE ON session_events
WHEN old.search_text IS NOT NULL
BEGIN
    INSERT INTO session_search (session_search, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
END;
