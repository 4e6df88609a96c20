-- Why: export must be byte-identical, a fork copies payload bytes and I3 needs the prompt
-- bytes stable, but `jsonb` re-orders keys and re-spaces the text. `json` keeps the text
-- as written (and still checks it is JSON). What depends on the column is dropped and made
-- again over the new type: the search column and its index (V2), the expression indexes
-- (V5) and the object check (V1).

DROP INDEX session_events_attempts;
DROP INDEX session_events_permission_answers;
DROP INDEX session_search;
ALTER TABLE session_events DROP COLUMN search_text;
ALTER TABLE session_events DROP CONSTRAINT session_events_payload_check;

ALTER TABLE session_events ALTER COLUMN payload TYPE json USING payload::text::json;
ALTER TABLE session_events ADD CONSTRAINT session_events_payload_check
    CHECK (json_typeof(payload) = 'object');

ALTER TABLE session_events ADD COLUMN search_text tsvector GENERATED ALWAYS AS (
    to_tsvector('simple', coalesce(
        CASE kind
            WHEN 'user_message'       THEN payload ->> 'text'
            WHEN 'assistant_turn'     THEN payload ->> 'text'
            WHEN 'pending_state'      THEN payload ->> 'text'
            WHEN 'compaction_applied' THEN payload ->> 'summary'
            WHEN 'session_started'    THEN payload ->> 'title'
            WHEN 'session_titled'     THEN payload ->> 'title'
        END, ''))
) STORED;
CREATE INDEX session_search ON session_events USING gin (search_text);

CREATE INDEX session_events_attempts ON session_events (session_id, (payload ->> 'turn'))
    WHERE kind IN ('pending_state', 'assistant_turn');
CREATE INDEX session_events_permission_answers
    ON session_events (session_id, (payload ->> 'call_id'))
    WHERE kind = 'permission_resolved';
