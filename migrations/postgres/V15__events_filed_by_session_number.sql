-- Why: as migrations/sqlite V15, which files SQLite's events under a small session number
-- instead of the session id's 36 bytes of text. PostgreSQL keeps `session_id uuid`
-- (16 bytes, the native type), so it has nothing to change; this file keeps the two
-- dialects in step, version for version.
SELECT 1;
