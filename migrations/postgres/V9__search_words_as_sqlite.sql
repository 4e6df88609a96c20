-- Why: plain search must mean the same on both stores (SPEC §7). PostgreSQL's default
-- parser kept emails, hosts, URLs, paths, versions and tags as single words, so `example`
-- did not find `alice@example.com` nor `b` find `<b>bold</b>`; SQLite's unicode61 splits
-- at every character that is not a letter or digit. The search column now replaces every
-- run of separators with a space before `to_tsvector('simple', …)`. The separators are
-- spelled out by code point (src/session/store/pg/snippet.rs holds the same class), not
-- asked of the locale: under LC_CTYPE=C, [[:alnum:]] calls every non-ASCII letter a
-- separator. Diacritics are kept (PostgreSQL's core has no unaccent): a known difference.
--
-- And a `\u0000` escape in a payload made `->>` fail (a NUL cannot be text), so the event
-- could not be written at all. The column reads the payload with each NUL escape (an
-- escape is a backslash preceded by an even number of backslashes) made a space, a
-- separator either way; the payload itself keeps its bytes.

DROP INDEX session_search;
ALTER TABLE session_events DROP COLUMN search_text;

ALTER TABLE session_events ADD COLUMN search_text tsvector GENERATED ALWAYS AS (
    to_tsvector('simple', regexp_replace(coalesce(
        CASE WHEN kind IN ('user_message', 'assistant_turn', 'pending_state',
                           'compaction_applied', 'session_started', 'session_titled')
        THEN json_extract_path_text(
            CASE WHEN strpos(payload::text, '\u0000') > 0
                 THEN regexp_replace(payload::text,
                                     '(?<!\\)((?:\\\\)*)\\u0000', '\1\\u0020', 'g')::json
                 ELSE payload
            END,
            CASE kind
                WHEN 'compaction_applied' THEN 'summary'
                WHEN 'session_started'    THEN 'title'
                WHEN 'session_titled'     THEN 'title'
                ELSE 'text'
            END)
        END, ''),
        '[\x01-\x2F\x3A-\x40\x5B-\x60\x7B-\x7F\u0080-\u00BF\u00D7\u00F7\u2000-\u206F\u20A0-\u20CF\u2190-\u245F\u2500-\u2BFF\u3000-\u3004\u3008-\u3020\uFE10-\uFE1F\uFE30-\uFE6F\uFF00-\uFF0F\uFF1A-\uFF20\uFF3B-\uFF40\uFF5B-\uFF65\uFFF0-\uFFFF\U0001F000-\U0001FAFF]+',
        ' ', 'g'))
) STORED;

CREATE INDEX session_search ON session_events USING gin (search_text);
