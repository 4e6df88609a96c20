-- Why: as migrations/sqlite V16, which puts the keys a question is paired by into SQLite's
-- index so the restart recovery reads that index alone. PostgreSQL cannot answer a query
-- from an index on expressions without the table's rows (its index-only scans need the
-- columns themselves), and reads the same keys through V13's index; this file keeps the
-- two dialects in step, version for version.
SELECT 1;
