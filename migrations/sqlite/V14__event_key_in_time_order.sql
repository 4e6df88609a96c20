-- Why: newest first (search `order=recent`, and the newest matches best first ranks) is by
-- the event's time, not by when its row reached this database: keyed by arrival, an import
-- of older history came back before everything written since (issue 27 item 8). FTS5 reads
-- matches by rowid without sorting, so the rowid, `session_events.id`, becomes the event's
-- time in milliseconds, the next free one on a tie (src/session/store/key.rs writes new
-- events so). Here every existing event is re-keyed by the same rule, in the order
-- (time, session, seq), and the index rebuilt on the new keys.

-- key_i = max(ms_i, key_(i-1) + 1), in sorted order, is i + the running max of (ms_j - j).
CREATE TEMP TABLE rekey (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    key        INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
INSERT INTO temp.rekey (session_id, seq, key)
    SELECT session_id, seq, n + MAX(ms - n) OVER (ORDER BY n ROWS UNBOUNDED PRECEDING)
    FROM (SELECT session_id, seq, ms, ROW_NUMBER() OVER (ORDER BY ms, session_id, seq) AS n
          FROM (SELECT session_id, seq,
                       MAX(1, COALESCE(CAST(round(unixepoch(created_at, 'subsec') * 1000)
                                            AS INTEGER), 1)) AS ms
                FROM session_events));

-- The one change I1's trigger allows, made in two steps so no new key meets an old one.
DROP TRIGGER session_events_append_only;
UPDATE session_events SET id = -id;
UPDATE session_events SET id = (
    SELECT r.key FROM temp.rekey r
    WHERE r.session_id = session_events.session_id AND r.seq = session_events.seq);
DROP TABLE temp.rekey;
CREATE TRIGGER session_events_append_only BEFORE UPDATE ON session_events
BEGIN
    SELECT RAISE(ABORT, 'session_events is append-only');
END;

-- The index on the new keys, holding what it held: every searchable event but the
-- checkpoints of attempts that completed (V8).
INSERT INTO session_search (session_search) VALUES ('delete-all');
INSERT INTO session_search (rowid, search_text)
    SELECT c.id, c.search_text
    FROM session_events c
    WHERE c.search_text IS NOT NULL
      AND NOT (c.kind = 'pending_state' AND EXISTS (
          SELECT 1 FROM session_events a INDEXED BY session_events_attempts
          WHERE a.session_id = c.session_id
            AND a.kind IN ('pending_state', 'assistant_turn')
            AND json_extract(a.payload, '$.turn') = json_extract(c.payload, '$.turn')
            AND a.kind = 'assistant_turn'
            AND json_extract(a.payload, '$.attempt') = json_extract(c.payload, '$.attempt')));
