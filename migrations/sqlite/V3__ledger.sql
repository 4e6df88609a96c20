-- Why: one row per provider call (SPEC §6), for usage accounting. No foreign key to
-- sessions: the ledger keeps its rows when a session is deleted.

CREATE TABLE ledger (
    id                  INTEGER PRIMARY KEY,
    session_id          TEXT,
    purpose             TEXT NOT NULL CHECK (purpose IN ('chat', 'summarize', 'distill', 'title')),
    provider            TEXT NOT NULL,
    model               TEXT NOT NULL,
    input_tokens        INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens       INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cache_read_tokens   INTEGER NOT NULL DEFAULT 0 CHECK (cache_read_tokens >= 0),
    cache_write_tokens  INTEGER NOT NULL DEFAULT 0 CHECK (cache_write_tokens >= 0),
    latency_ms          INTEGER NOT NULL CHECK (latency_ms >= 0),
    status              TEXT NOT NULL,
    error_code          TEXT,
    created_at          TEXT NOT NULL
);

CREATE INDEX ledger_by_session ON ledger (session_id);
