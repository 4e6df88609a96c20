-- Why: nothing changes in SQLite. PostgreSQL's V9 makes its search column split words at
-- every separator, as SQLite's unicode61 tokenizer does, and read a payload holding a NUL
-- escape. This file keeps the two dialects' migrations in step file for file.
SELECT 1;
