-- Why: kept in step with migrations/postgres V17, which re-keys PostgreSQL's index of
-- permission events by a hash of the call id because a b-tree row there holds at most
-- ~2.7 KB. SQLite's index holds a key of any length (it spills to overflow pages), so
-- nothing changes here.
SELECT 1;
