-- Why: an answer streams into `pending_state` checkpoints, then its `assistant_turn` holds
-- the same text again. The search never showed a checkpoint of an attempt that completed
-- (it filtered them out at query time), yet the FTS index kept all of their words: about
-- 40% of the index on a realistic corpus (issue 19, BENCHMARKS.md). The log keeps the
-- checkpoints (I1); the index now drops them once the attempt completes. Interrupted
-- attempts keep theirs: they are the partial a search should find.

-- When an attempt completes, its checkpoints leave the index. The docsize guard makes the
-- removal exact: FTS5 removes only rows it holds (removing one it does not would corrupt
-- it, and an attempt completes once, but a log is data and data can be odd).
CREATE TRIGGER session_search_completed AFTER INSERT ON session_events
WHEN new.kind = 'assistant_turn'
BEGIN
    INSERT INTO session_search (session_search, rowid, search_text)
        SELECT 'delete', c.id, c.search_text
        FROM session_events c INDEXED BY session_events_attempts
        WHERE c.session_id = new.session_id
          AND c.kind IN ('pending_state', 'assistant_turn')
          AND json_extract(c.payload, '$.turn') = json_extract(new.payload, '$.turn')
          AND c.kind = 'pending_state'
          AND json_extract(c.payload, '$.attempt') = json_extract(new.payload, '$.attempt')
          AND c.search_text IS NOT NULL
          AND EXISTS (SELECT 1 FROM session_search_docsize d WHERE d.id = c.id);
END;

-- Removing an event (a session's delete or purge, in any order) removes its index row only
-- if the index still holds it: a completed attempt's checkpoints are already gone.
DROP TRIGGER session_search_delete;
CREATE TRIGGER session_search_delete AFTER DELETE ON session_events
WHEN old.search_text IS NOT NULL
    AND EXISTS (SELECT 1 FROM session_search_docsize d WHERE d.id = old.id)
BEGIN
    INSERT INTO session_search (session_search, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
END;

-- The index of an existing database: the checkpoints of every attempt that completed.
INSERT INTO session_search (session_search, rowid, search_text)
    SELECT 'delete', c.id, c.search_text
    FROM session_events c
    WHERE c.kind = 'pending_state'
      AND c.search_text IS NOT NULL
      AND EXISTS (
          SELECT 1 FROM session_events a INDEXED BY session_events_attempts
          WHERE a.session_id = c.session_id
            AND a.kind IN ('pending_state', 'assistant_turn')
            AND json_extract(a.payload, '$.turn') = json_extract(c.payload, '$.turn')
            AND a.kind = 'assistant_turn'
            AND json_extract(a.payload, '$.attempt') = json_extract(c.payload, '$.attempt'));
