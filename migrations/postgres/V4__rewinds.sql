-- Why: editing a message (SPEC §14) writes a `rewind` that may hide the newest compaction,
-- so the tail the LLM context reads starts at the newest *visible* compaction. Finding it
-- needs a session's rewinds and compactions; this finds the rewinds without scanning the
-- whole log, as session_events_compactions finds the compactions.
CREATE INDEX session_events_rewinds ON session_events (session_id, seq)
    WHERE kind = 'rewind';
