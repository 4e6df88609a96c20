-- Why: nothing changes in PostgreSQL. SQLite's V8 drops the FTS5 index rows of checkpoints
-- whose attempt completed (the search never shows them; their text is in the answer).
-- PostgreSQL's index is a GIN over a generated column of each row, which cannot depend on
-- a later row; a search there leaves those checkpoints out at query time, as SQLite's did
-- before V8. This file keeps the two dialects' migrations in step file for file.
SELECT 1;
