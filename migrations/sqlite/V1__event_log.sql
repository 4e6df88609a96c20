-- Why: the event log itself (SPEC §2 I1, §3). Every session is an append-only list of
-- events keyed (session_id, seq); `sessions` is a cache of what the log says, kept up to
-- date in the same transaction as each append.

CREATE TABLE sessions (
    id          TEXT PRIMARY KEY NOT NULL,  -- uuid v7, lowercase hyphenated
    title       TEXT,                       -- NULL: untitled
    archived    INTEGER NOT NULL DEFAULT 0 CHECK (archived IN (0, 1)),
    system      TEXT NOT NULL,              -- the system prompt, fixed at creation
    created_at  TEXT NOT NULL,              -- RFC 3339 UTC, six fractional digits, 'Z'
    updated_at  TEXT NOT NULL
) WITHOUT ROWID;

-- The session list pages by the keyset (updated_at DESC, id DESC), with or without the
-- archived filter.
CREATE INDEX sessions_keyset ON sessions (updated_at, id);
CREATE INDEX sessions_archived_keyset ON sessions (archived, updated_at, id);

-- Clustered by (session_id, seq): replaying one session reads contiguous pages even when
-- sessions interleave in time. `id` is the integer key the FTS5 external-content index
-- needs; it is allocated with seq in the append transaction.
CREATE TABLE session_events (
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    id          INTEGER NOT NULL UNIQUE,
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL CHECK (json_valid(payload) AND json_type(payload) = 'object'),
    created_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- Finds a session's newest compaction without scanning its whole log.
CREATE INDEX session_events_compactions ON session_events (session_id, seq)
    WHERE kind = 'compaction_applied';

-- I1 in the schema itself: an event is never changed once written.
CREATE TRIGGER session_events_append_only BEFORE UPDATE ON session_events
BEGIN
    SELECT RAISE(ABORT, 'session_events is append-only');
END;
