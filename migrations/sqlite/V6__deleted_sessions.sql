-- Why: deleting a long session in one transaction held the single writer for as long as
-- its events took to delete (SPEC §7 DELETE; issue 19). A delete now only stamps
-- `deleted_at` (one row, at once); every read treats a stamped session as missing, and a
-- background purge removes its events and index rows in small transactions, then the row.
-- The stamp is durable, so a purge cut short by a crash resumes at the next open.
ALTER TABLE sessions ADD COLUMN deleted_at TEXT;

-- The purge finds its work without scanning the sessions (almost none are ever pending).
CREATE INDEX sessions_deleted ON sessions (deleted_at) WHERE deleted_at IS NOT NULL;
