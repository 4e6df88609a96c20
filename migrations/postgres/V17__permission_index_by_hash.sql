-- Why: a b-tree row holds at most ~2.7 KB, and a call id is whatever a provider sent (or an
-- import held): a question whose call id was longer than that could not be written. The
-- index keys the call id's md5 instead (32 characters whatever its length); every query
-- compares the hash, which the index finds, and then the call id itself
-- (src/session/store/pg/read.rs).
DROP INDEX session_events_permissions;
CREATE INDEX session_events_permissions
    ON session_events (session_id, md5(brain_field(payload, 'call_id')))
    WHERE kind IN ('permission_requested', 'permission_resolved');
