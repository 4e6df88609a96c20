-- Why: the restart recovery (issue 27 item 2) looks at startup for permission questions no
-- answer closed. It read every question and answer of every session: 51,424 rows spread
-- over a 10M-event table, a random page read each, 234 ms before listening (an index on the
-- fields it pairs by does not help: SQLite still reads each row of a WITHOUT ROWID table
-- behind an index on expressions). Now each question and answer also files its keys here
-- (a trigger, so every write path does: append, import, fork), and the recovery removes
-- the rows it has checked: a session's rows up to a seq are removed once every question
-- up to there has its answer, which later events cannot change (an answer closes a question
-- before it). So a start reads only what was asked since the last one: usually nothing.
-- The keys are `json_extract`'s values: src/session/store/read.rs reads a field of another
-- type as one the event would not decode with.
CREATE TABLE questions_to_check (
    session_n   INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    -- No declared type: the values stay as `json_extract` gave them (a column declared
    -- `ANY` outside a STRICT table has numeric affinity and would turn '2' into 2).
    call_id,
    turn,
    attempt,
    PRIMARY KEY (session_n, seq)
) WITHOUT ROWID;

-- What an earlier brain left (a kill may have left questions open): all of it, once.
INSERT INTO questions_to_check (session_n, seq, kind, call_id, turn, attempt)
    SELECT session_n, seq, kind, json_extract(payload, '$.call_id'),
           json_extract(payload, '$.turn'), json_extract(payload, '$.attempt')
    FROM session_events INDEXED BY session_events_permissions
    WHERE kind IN ('permission_requested', 'permission_resolved');

CREATE TRIGGER questions_to_check_insert AFTER INSERT ON session_events
WHEN new.kind IN ('permission_requested', 'permission_resolved')
BEGIN
    INSERT INTO questions_to_check (session_n, seq, kind, call_id, turn, attempt)
        VALUES (new.session_n, new.seq, new.kind, json_extract(new.payload, '$.call_id'),
                json_extract(new.payload, '$.turn'), json_extract(new.payload, '$.attempt'));
END;
-- The purge of a deleted session takes its rows with it.
CREATE TRIGGER questions_to_check_delete AFTER DELETE ON session_events
WHEN old.kind IN ('permission_requested', 'permission_resolved')
BEGIN
    DELETE FROM questions_to_check WHERE session_n = old.session_n AND seq = old.seq;
END;
