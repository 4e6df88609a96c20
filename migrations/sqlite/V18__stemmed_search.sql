-- Why: a search for `hostel` did not find "hostels" (issue 34 item 10). Stemming is an
-- option (`stem=true`), not the default: plain search keeps meaning the same whole words
-- on both stores. A second FTS5 index tokenized `porter unicode61`, over the same text as
-- `session_search` (V2), holding the same rows (V8: a completed attempt's checkpoints
-- leave it) and kept in step by the same triggers, so a delete or purge removes a
-- session's rows from both. `search_stem` is the same text under its own name, so the
-- index's column names a column of its content table (and PostgreSQL's V18 column of the
-- same name keeps the two schemas' column lists alike).

ALTER TABLE session_events ADD COLUMN search_stem TEXT GENERATED ALWAYS AS (search_text) VIRTUAL;

CREATE VIRTUAL TABLE session_search_stem USING fts5 (
    search_stem,
    content = 'session_events',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER session_search_stem_insert AFTER INSERT ON session_events
WHEN new.search_stem IS NOT NULL
BEGIN
    INSERT INTO session_search_stem (rowid, search_stem) VALUES (new.id, new.search_stem);
END;

CREATE TRIGGER session_search_stem_completed AFTER INSERT ON session_events
WHEN new.kind = 'assistant_turn'
BEGIN
    INSERT INTO session_search_stem (session_search_stem, rowid, search_stem)
        SELECT 'delete', c.id, c.search_stem
        FROM session_events c INDEXED BY session_events_attempts
        WHERE c.session_n = new.session_n
          AND c.kind IN ('pending_state', 'assistant_turn')
          AND json_extract(c.payload, '$.turn') = json_extract(new.payload, '$.turn')
          AND c.kind = 'pending_state'
          AND json_extract(c.payload, '$.attempt') = json_extract(new.payload, '$.attempt')
          AND c.search_stem IS NOT NULL
          AND EXISTS (SELECT 1 FROM session_search_stem_docsize d WHERE d.id = c.id);
END;

CREATE TRIGGER session_search_stem_delete AFTER DELETE ON session_events
WHEN old.search_stem IS NOT NULL
    AND EXISTS (SELECT 1 FROM session_search_stem_docsize d WHERE d.id = old.id)
BEGIN
    INSERT INTO session_search_stem (session_search_stem, rowid, search_stem)
        VALUES ('delete', old.id, old.search_stem);
END;

-- The existing events: what `session_search` holds (V14's selection).
INSERT INTO session_search_stem (rowid, search_stem)
    SELECT c.id, c.search_stem
    FROM session_events c
    WHERE c.search_stem IS NOT NULL
      AND NOT (c.kind = 'pending_state' AND EXISTS (
          SELECT 1 FROM session_events a INDEXED BY session_events_attempts
          WHERE a.session_n = c.session_n
            AND a.kind IN ('pending_state', 'assistant_turn')
            AND json_extract(a.payload, '$.turn') = json_extract(c.payload, '$.turn')
            AND a.kind = 'assistant_turn'
            AND json_extract(a.payload, '$.attempt') = json_extract(c.payload, '$.attempt')));
