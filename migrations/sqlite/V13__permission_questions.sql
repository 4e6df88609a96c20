-- Why: a call id names a call only within its attempt (a provider that sends no ids gets
-- `call_0` every turn), and answers written before they named their turn and attempt belong
-- to the newest unanswered question of their call id before them. So a transcript page
-- pairing an answer with a question needs that call id's questions as well as its answers,
-- a late answer's 409 needs the newest question and its answer, and the recovery at
-- startup needs every question without an answer: one index over both kinds serves all,
-- replacing V5's index over the answers alone.
DROP INDEX session_events_permission_answers;
CREATE INDEX session_events_permissions
    ON session_events (session_id, json_extract(payload, '$.call_id'))
    WHERE kind IN ('permission_requested', 'permission_resolved');
