-- Why: nothing changes in SQLite, whose JSON functions read a NUL escape. PostgreSQL's V10
-- reads payload fields through a function that a `\u0000` escape does not make fail. This
-- file keeps the two dialects' migrations in step file for file.
SELECT 1;
