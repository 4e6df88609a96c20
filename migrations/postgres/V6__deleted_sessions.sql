-- Why: the same column as migrations/sqlite/V6 (the two schemas keep the same tables and
-- columns). On SQLite a delete stamps `deleted_at` and a background purge removes the
-- events in small transactions, so the single writer is never held long; PostgreSQL has
-- no single writer, so its store deletes at once and this column stays NULL there.
ALTER TABLE sessions ADD COLUMN deleted_at timestamptz;
