-- Why: as migrations/sqlite V13: a call id names a call only within its attempt, so pairing
-- an answer with its question needs that call id's questions as well as its answers (a
-- transcript page, a late answer's 409, the recovery at startup). One index over both kinds
-- replaces V5's (V10's) over the answers alone; the field is read through `brain_field`
-- (V10), as every query reads it.
DROP INDEX session_events_permission_answers;
CREATE INDEX session_events_permissions
    ON session_events (session_id, brain_field(payload, 'call_id'))
    WHERE kind IN ('permission_requested', 'permission_resolved');
