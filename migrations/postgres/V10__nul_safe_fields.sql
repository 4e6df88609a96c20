-- Why: on the `json` type (V7) `->>` fails on a `\u0000` escape anywhere in the document
-- ("unsupported Unicode escape sequence"), so V5's expression indexes on `payload ->>
-- 'turn'` and `->> 'call_id'` refused every `pending_state`/`assistant_turn` or
-- `permission_resolved` whose text held a NUL: the answer was lost, and an import of a
-- history holding one aborted. `brain_field` reads a field with each NUL escape removed
-- (an escape is a backslash preceded by an even number of backslashes, so a typed
-- `\u0000`, written `\\u0000`, stays as it is), as V9's search column does; the payload
-- keeps its bytes. The indexes and every query (src/session/store/pg) read fields through
-- it, so the queries still match the indexes.
CREATE FUNCTION brain_field(payload json, key text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT CASE WHEN strpos(payload::text, '\u0000') > 0
            THEN regexp_replace(payload::text,
                                '(?<!\\)((?:\\\\)*)\\u0000', '\1', 'g')::json ->> key
            ELSE payload ->> key
        END
    $$;

DROP INDEX session_events_attempts;
DROP INDEX session_events_permission_answers;
CREATE INDEX session_events_attempts
    ON session_events (session_id, brain_field(payload, 'turn'))
    WHERE kind IN ('pending_state', 'assistant_turn');
CREATE INDEX session_events_permission_answers
    ON session_events (session_id, brain_field(payload, 'call_id'))
    WHERE kind = 'permission_resolved';
