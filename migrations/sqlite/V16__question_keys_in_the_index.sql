-- Why: the restart recovery (issue 27 item 2) looks at startup for questions no answer
-- closed, across every session. It read each question and answer row (51,424 of them
-- spread over a 10M-event table: a random page read each, 234 ms before listening). What
-- it pairs them by (call id, turn, attempt, and which of the two kinds a row is) now sits
-- in the index itself, so that scan reads this small index and nothing else (a covering
-- index: SQLite takes an indexed expression's value from the index). The index still
-- serves V13's lookup of one call id's questions, by its first two columns.
DROP INDEX session_events_permissions;
CREATE INDEX session_events_permissions
    ON session_events (session_n, json_extract(payload, '$.call_id'), kind,
                       json_extract(payload, '$.turn'), json_extract(payload, '$.attempt'))
    WHERE kind IN ('permission_requested', 'permission_resolved');
