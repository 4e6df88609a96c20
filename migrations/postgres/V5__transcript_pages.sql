-- Why: a transcript page (SPEC §7 `before_seq`) reads a window of events, not the whole
-- log; an item in it may need events outside the window. A checkpoint needs its attempt's
-- other checkpoints and the attempt's `assistant_turn` (all of one turn), a permission
-- question its answer. These find them by turn and by call id without scanning the log.
CREATE INDEX session_events_attempts ON session_events (session_id, (payload ->> 'turn'))
    WHERE kind IN ('pending_state', 'assistant_turn');
CREATE INDEX session_events_permission_answers
    ON session_events (session_id, (payload ->> 'call_id'))
    WHERE kind = 'permission_resolved';
