-- Why: a search for `hostel` did not find "hostels" (issue 34 item 10). Stemming is an
-- option (`stem=true`), not the default, as on SQLite (its V18: a porter-tokenized FTS5
-- index). Here a second tsvector column over the same text as V9's `search_text`, split at
-- the same separators, through `brain_stem`: the `simple` configuration with every word
-- mapped to the Snowball English stemmer instead. Not the stock `english` configuration:
-- it drops stop words, and SQLite's porter keeps every word (`the` still finds "the"). A
-- generated column of each row, so a delete takes it with the row. Snowball English is
-- porter's successor: a few words stem differently from SQLite's (a known difference).

CREATE TEXT SEARCH DICTIONARY brain_stem (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION brain_stem (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION brain_stem ALTER MAPPING REPLACE simple WITH brain_stem;

ALTER TABLE session_events ADD COLUMN search_stem tsvector GENERATED ALWAYS AS (
    to_tsvector('brain_stem', regexp_replace(coalesce(
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

CREATE INDEX session_search_stem ON session_events USING gin (search_stem);
