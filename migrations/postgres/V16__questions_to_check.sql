-- Why: as migrations/sqlite V16: each question and answer is filed here (a trigger, so
-- every write path files it), and the restart recovery reads the events this table points
-- at and removes what it has checked, instead of reading every question and answer of every
-- session at each start. The key columns say what was filed, for a person looking; the
-- recovery takes each key from the decoded event (src/session/store/pg/read.rs), as SQL and
-- serde read JSON by different rules (a NUL, an object where a string belongs).
CREATE TABLE questions_to_check (
    session_id  uuid NOT NULL,
    seq         bigint NOT NULL,
    kind        text NOT NULL,
    call_id     text,
    turn        text,
    attempt     text,
    PRIMARY KEY (session_id, seq)
);

-- The payload with each NUL escape removed, as `brain_field` (V10) reads it: `->` and `->>`
-- fail on a `\u0000` anywhere in a `json` document, and a question's arguments may hold one.
CREATE FUNCTION brain_nul_free(payload json) RETURNS json
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT CASE WHEN strpos(payload::text, '\u0000') > 0
            THEN regexp_replace(payload::text,
                                '(?<!\\)((?:\\\\)*)\\u0000', '\1', 'g')::json
            ELSE payload
        END
    $$;

-- A key's text when it is of type `want`; NULL when absent or null; else `other`.
CREATE FUNCTION brain_question_key(payload json, key text, want text, other text)
    RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT CASE coalesce(json_typeof(payload -> key), 'null')
            WHEN 'null' THEN NULL
            WHEN want THEN payload ->> key
            ELSE other
        END
    $$;

CREATE FUNCTION questions_to_check_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    p json := brain_nul_free(NEW.payload);
BEGIN
    INSERT INTO questions_to_check (session_id, seq, kind, call_id, turn, attempt)
        VALUES (NEW.session_id, NEW.seq, NEW.kind,
                brain_question_key(p, 'call_id', 'string', NULL),
                brain_question_key(p, 'turn', 'number', '?'),
                brain_question_key(p, 'attempt', 'number', '?'));
    RETURN NULL;
END;
$$;

CREATE FUNCTION questions_to_check_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM questions_to_check WHERE session_id = OLD.session_id AND seq = OLD.seq;
    RETURN NULL;
END;
$$;

CREATE TRIGGER questions_to_check_insert AFTER INSERT ON session_events
    FOR EACH ROW WHEN (NEW.kind IN ('permission_requested', 'permission_resolved'))
    EXECUTE FUNCTION questions_to_check_insert();
CREATE TRIGGER questions_to_check_delete AFTER DELETE ON session_events
    FOR EACH ROW WHEN (OLD.kind IN ('permission_requested', 'permission_resolved'))
    EXECUTE FUNCTION questions_to_check_delete();

-- What an earlier brain left (a kill may have left questions open): all of it, once, after
-- the triggers exist. CREATE TRIGGER locks session_events against writes until this
-- migration commits, so a question an older server writes meanwhile is either committed
-- before the lock (and copied here) or waits and is filed by the trigger: none falls in
-- between (a rolling upgrade in a team). Those writes wait for the copy (about half a
-- second at 10M events). Were the migration not one transaction, a row the trigger filed
-- before the copy would be copied again: skipped.
INSERT INTO questions_to_check (session_id, seq, kind, call_id, turn, attempt)
    SELECT session_id, seq, kind, brain_question_key(p, 'call_id', 'string', NULL),
           brain_question_key(p, 'turn', 'number', '?'),
           brain_question_key(p, 'attempt', 'number', '?')
    FROM (SELECT session_id, seq, kind, brain_nul_free(payload) AS p FROM session_events
          WHERE kind IN ('permission_requested', 'permission_resolved')) AS e
    ON CONFLICT DO NOTHING;
