-- Why: bytes per event (SPEC §16, issue 27). Every event was filed under its session's
-- 36-byte id text, and that text sat three times in each event's bytes: in the table's key,
-- in the `UNIQUE (id)` index (the FTS key's index holds the primary key too) and in the
-- attempts index. Events are now filed under `sessions.n`, a small integer the session
-- gets when it is created (1 to 3 bytes). The session's id stays the one the API, the
-- export and PostgreSQL know; `n` never leaves this file's database. Nothing an event
-- holds changes: same seq, same key (`id`, so the FTS5 index is kept as it is), same kind,
-- payload and time, byte for byte.

-- What refers to the two tables goes first: their names are taken again below.
DROP TRIGGER session_search_insert;
DROP TRIGGER session_search_completed;
DROP TRIGGER session_search_delete;
DROP TRIGGER session_events_append_only;
DROP INDEX session_events_compactions;
DROP INDEX session_events_rewinds;
DROP INDEX session_events_attempts;
DROP INDEX session_events_permissions;
DROP INDEX sessions_keyset;
DROP INDEX sessions_archived_keyset;
DROP INDEX sessions_deleted;
ALTER TABLE session_events RENAME TO session_events_v14;
ALTER TABLE sessions RENAME TO sessions_v14;

-- `n` is the rowid: a new session takes the next one without being told.
CREATE TABLE sessions (
    n           INTEGER PRIMARY KEY,        -- the number its events are filed under
    id          TEXT NOT NULL UNIQUE,       -- uuid v7, lowercase hyphenated
    title       TEXT,                       -- NULL: untitled
    archived    INTEGER NOT NULL DEFAULT 0 CHECK (archived IN (0, 1)),
    system      TEXT NOT NULL,              -- the system prompt, fixed at creation
    created_at  TEXT NOT NULL,              -- RFC 3339 UTC, six fractional digits, 'Z'
    updated_at  TEXT NOT NULL,
    deleted_at  TEXT                        -- set by delete; the purge removes the row (V6)
);
INSERT INTO sessions (n, id, title, archived, system, created_at, updated_at, deleted_at)
    SELECT ROW_NUMBER() OVER (ORDER BY created_at, id),
           id, title, archived, system, created_at, updated_at, deleted_at
    FROM sessions_v14;
CREATE INDEX sessions_keyset ON sessions (updated_at, id);
CREATE INDEX sessions_archived_keyset ON sessions (archived, updated_at, id);
CREATE INDEX sessions_deleted ON sessions (deleted_at) WHERE deleted_at IS NOT NULL;

-- Clustered by (session_n, seq) as before by (session_id, seq): replaying one session
-- reads contiguous pages.
CREATE TABLE session_events (
    session_n   INTEGER NOT NULL REFERENCES sessions (n),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    id          INTEGER NOT NULL UNIQUE,    -- the FTS5 key: the event's time in ms (V14)
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL CHECK (json_valid(payload) AND json_type(payload) = 'object'),
    created_at  TEXT NOT NULL,
    search_text TEXT GENERATED ALWAYS AS (
        CASE kind
            WHEN 'user_message'       THEN json_extract(payload, '$.text')
            WHEN 'assistant_turn'     THEN json_extract(payload, '$.text')
            WHEN 'pending_state'      THEN json_extract(payload, '$.text')
            WHEN 'compaction_applied' THEN json_extract(payload, '$.summary')
            WHEN 'session_started'    THEN json_extract(payload, '$.title')
            WHEN 'session_titled'     THEN json_extract(payload, '$.title')
        END
    ) VIRTUAL,
    PRIMARY KEY (session_n, seq)
) WITHOUT ROWID;
INSERT INTO session_events (session_n, seq, id, kind, payload, created_at)
    SELECT s.n, e.seq, e.id, e.kind, e.payload, e.created_at
    FROM session_events_v14 e JOIN sessions s ON s.id = e.session_id
    ORDER BY s.n, e.seq;
DROP TABLE session_events_v14;
DROP TABLE sessions_v14;

-- The indexes of V1, V4, V5 and V13, on the number.
CREATE INDEX session_events_compactions ON session_events (session_n, seq)
    WHERE kind = 'compaction_applied';
CREATE INDEX session_events_rewinds ON session_events (session_n, seq)
    WHERE kind = 'rewind';
CREATE INDEX session_events_attempts
    ON session_events (session_n, json_extract(payload, '$.turn'))
    WHERE kind IN ('pending_state', 'assistant_turn');
CREATE INDEX session_events_permissions
    ON session_events (session_n, json_extract(payload, '$.call_id'))
    WHERE kind IN ('permission_requested', 'permission_resolved');

-- I1 in the schema (V1), and the FTS5 index kept in step (V2, V8). The index itself is
-- untouched: its rowids are the events' keys, which did not change.
CREATE TRIGGER session_events_append_only BEFORE UPDATE ON session_events
BEGIN
    SELECT RAISE(ABORT, 'session_events is append-only');
END;
CREATE TRIGGER session_search_insert AFTER INSERT ON session_events
WHEN new.search_text IS NOT NULL
BEGIN
    INSERT INTO session_search (rowid, search_text) VALUES (new.id, new.search_text);
END;
CREATE TRIGGER session_search_completed AFTER INSERT ON session_events
WHEN new.kind = 'assistant_turn'
BEGIN
    INSERT INTO session_search (session_search, rowid, search_text)
        SELECT 'delete', c.id, c.search_text
        FROM session_events c INDEXED BY session_events_attempts
        WHERE c.session_n = new.session_n
          AND c.kind IN ('pending_state', 'assistant_turn')
          AND json_extract(c.payload, '$.turn') = json_extract(new.payload, '$.turn')
          AND c.kind = 'pending_state'
          AND json_extract(c.payload, '$.attempt') = json_extract(new.payload, '$.attempt')
          AND c.search_text IS NOT NULL
          AND EXISTS (SELECT 1 FROM session_search_docsize d WHERE d.id = c.id);
END;
CREATE TRIGGER session_search_delete AFTER DELETE ON session_events
WHEN old.search_text IS NOT NULL
    AND EXISTS (SELECT 1 FROM session_search_docsize d WHERE d.id = old.id)
BEGIN
    INSERT INTO session_search (session_search, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
END;
