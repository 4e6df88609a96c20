//! Listing sessions (keyset pages) and searching messages (FTS5).

#[cfg(test)]
use rusqlite::params;
use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, params_from_iter};

#[cfg(test)]
use super::SqliteStore;
use super::read::session_row;
use crate::session::cursor::{ArchivedFilter, Cursor};
use crate::session::events::{Event, SessionId};
use crate::session::projection::is_abandoned;
use crate::session::search::{like_pattern, literal_words, markers, parse_marked, plain_to_fts};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::list::{
    ListQuery, RANK_WINDOW, SNIPPET_TOKENS, SearchHit, SearchOrder, SearchQuery, SessionPage,
    Syntax,
};

/// The list statement for one query: fixed fragments only (every value a client sends is
/// a bound parameter), chosen so each shape seeks the keyset index and reads it in order:
/// `archived = ?` (not a range) lets `sessions_archived_keyset` serve the ORDER BY.
fn list_statement(
    filter: ArchivedFilter,
    before: Option<&Cursor>,
    fts: Option<&str>,
    fetch: i64,
) -> (String, Vec<Value>) {
    let mut sql = String::from(
        "SELECT id, title, archived, system, created_at, updated_at FROM sessions
         WHERE deleted_at IS NULL",
    );
    let mut args = Vec::new();
    match filter {
        ArchivedFilter::Exclude => args.push(Value::Integer(0)),
        ArchivedFilter::Only => args.push(Value::Integer(1)),
        ArchivedFilter::Include => {}
    }
    if filter != ArchivedFilter::Include {
        sql.push_str(" AND archived = ?");
    }
    if let Some(c) = before {
        sql.push_str(" AND (updated_at, id) < (?, ?)");
        args.push(Value::Text(c.updated_at.clone()));
        args.push(Value::Text(c.id.to_string()));
    }
    if let Some(expr) = fts {
        sql.push_str(
            " AND n IN (SELECT e.session_n FROM session_search
              JOIN session_events e ON e.id = session_search.rowid
              WHERE session_search MATCH ?)",
        );
        args.push(Value::Text(expr.to_owned()));
    }
    sql.push_str(" ORDER BY updated_at DESC, id DESC LIMIT ?");
    args.push(Value::Integer(fetch));
    (sql, args)
}

/// A page of sessions, newest first by `(updated_at, id)`.
pub(super) fn list_sessions(conn: &Connection, q: &ListQuery) -> Result<SessionPage> {
    let fts = q.query.as_deref().and_then(plain_to_fts);
    let filter = q.archived.unwrap_or(if q.query.is_some() {
        ArchivedFilter::Include
    } else {
        ArchivedFilter::Exclude
    });
    if q.query.is_some() && fts.is_none() {
        // A query of blanks matches nothing rather than everything.
        return Ok(SessionPage {
            sessions: vec![],
            next: None,
        });
    }
    let fetch = i64::from(q.limit) + 1; // one more than asked: are there more?
    let (sql, args) = list_statement(filter, q.before.as_ref(), fts.as_deref(), fetch);
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = Vec::new();
    for row in stmt.query_map(params_from_iter(args), session_row)? {
        rows.push(row??);
    }
    Ok(SessionPage::from_fetched(rows, q.limit, q.before.as_ref()))
}

/// Messages, answers, partials, summaries and titles matching a query, best first.
pub(super) fn search(conn: &Connection, q: &SearchQuery) -> Result<Vec<SearchHit>> {
    let expr = match q.syntax {
        Syntax::Plain => match plain_to_fts(&q.text) {
            Some(e) => e,
            None => return Ok(vec![]),
        },
        Syntax::Fts if q.text.trim().is_empty() => {
            return Err(StoreError::BadQuery("the search is empty".into()));
        }
        Syntax::Fts => q.text.clone(),
    };
    if q.syntax == Syntax::Fts {
        check_fts(conn, &expr, q.stem).map_err(as_bad_query)?;
    }
    run_search(conn, &expr, q).map_err(|e| match q.syntax {
        Syntax::Fts => as_bad_query(e),
        Syntax::Plain => e,
    })
}

/// The search statement. A deleted session's events (waiting for their purge) are left out.
/// A checkpoint of an attempt that went on to complete is left out:
/// its answer holds the same text, and is what a reader should land on (the checkpoint has
/// no item of its own). An interrupted attempt's checkpoints stay: they are its partial.
fn run_search(conn: &Connection, expr: &str, q: &SearchQuery) -> Result<Vec<SearchHit>> {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let (open, close) = markers(&nonce);
    let literals = match q.syntax {
        Syntax::Plain => literal_words(&q.text),
        Syntax::Fts => vec![],
    };
    let sql = search_statement(q, !literals.is_empty());
    let mut stmt = conn.prepare_cached(&sql)?;
    let patterns =
        serde_json::Value::from(literals.iter().map(|l| like_pattern(l)).collect::<Vec<_>>())
            .to_string();
    let mut args: Vec<&dyn rusqlite::ToSql> = vec![&expr, &open, &close, &SNIPPET_TOKENS];
    if !literals.is_empty() {
        args.push(&patterns);
    }
    let rows = stmt.query_map(args.as_slice(), |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, Option<String>>(1)?,
            r.get::<_, u64>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
            r.get::<_, Option<String>>(5)?,
        ))
    })?;
    let mut hits = Vec::new();
    for row in rows {
        let (sid, title, seq, kind, created_at, marked) = row?;
        let session_id = sid
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("session id {sid:?} is not a UUID")))?;
        let (snippet, highlights) = parse_marked(&marked.unwrap_or_default(), &open, &close);
        hits.push(SearchHit {
            session_id,
            title,
            seq,
            kind,
            snippet,
            highlights,
            created_at,
            abandoned: false,
            also_in: vec![],
        });
    }
    mark_abandoned(conn, &mut hits)?;
    Ok(hits)
}

/// The search statement for one query's order and page. LIMIT, OFFSET and the window are
/// written into the statement (they are integers, never text a client wrote): bound as
/// parameters, SQLite planned the search slower, and a rare-word search took 1.5x the raw
/// statement (BENCHMARKS.md).
///
/// Both orders start from FTS5's matches read by rowid (the event's id: its time, see
/// [`super::key`]), which FTS5 reads from its index newest first without sorting. `Recent` stops at the
/// page. `Relevance` scores the newest [`RANK_WINDOW`] matches with bm25 in that same pass
/// (`bm25()` is what `rank` is: the table sets no other), sorts those, and only the page's
/// rows go back to FTS5 (by rowid) for their snippets: one pass over the index, never
/// more than the window scored.
///
/// `stem` reads the porter-tokenized index (V18) instead; `literals` adds the words that
/// must appear verbatim (`?5`, a JSON array of `LIKE` patterns, see
/// [`literal_words`]). SQLite's `LIKE` folds ASCII case only.
fn search_statement(q: &SearchQuery, literals: bool) -> String {
    let fts = if q.stem {
        "session_search_stem"
    } else {
        "session_search"
    };
    let verbatim = if literals {
        "AND NOT EXISTS (SELECT 1 FROM json_each(?5) l
                          WHERE e.search_text NOT LIKE l.value ESCAPE '\\')"
    } else {
        ""
    };
    let left_out = "NOT (e.kind = 'pending_state' AND EXISTS (
               SELECT 1 FROM session_events a
               WHERE a.session_n = e.session_n AND a.seq > e.seq
                 AND a.kind = 'assistant_turn'
                 AND json_extract(a.payload, '$.turn') = json_extract(e.payload, '$.turn')
                 AND json_extract(a.payload, '$.attempt') = json_extract(e.payload, '$.attempt')))
         AND e.session_n NOT IN (
               SELECT n FROM sessions INDEXED BY sessions_deleted WHERE deleted_at IS NOT NULL)";
    let left_out = format!("{left_out} {verbatim}");
    let columns =
        format!("s.id, s.title, e.seq, e.kind, e.created_at, snippet({fts}, 0, ?2, ?3, '…', ?4)");
    let (limit, offset) = (q.limit, q.offset);
    match q.order {
        SearchOrder::Recent => format!(
            "SELECT {columns}
             FROM {fts}
             JOIN session_events e ON e.id = {fts}.rowid
             JOIN sessions s ON s.n = e.session_n
             WHERE {fts} MATCH ?1 AND {left_out}
             ORDER BY {fts}.rowid DESC
             LIMIT {limit} OFFSET {offset}"
        ),
        SearchOrder::Relevance => format!(
            // The window counts only matches that can be hits: checkpoints of answers
            // that completed are left out before the newest N are taken (else a long
            // streamed answer's checkpoints could fill it and hide every real match).
            "WITH window AS (
                 SELECT {fts}.rowid AS id, bm25({fts}) AS score,
                        e.session_n, e.seq
                 FROM {fts} JOIN session_events e ON e.id = {fts}.rowid
                 WHERE {fts} MATCH ?1 AND {left_out}
                 ORDER BY {fts}.rowid DESC LIMIT {RANK_WINDOW}),
             page AS (
                 SELECT window.id, window.score, s.id AS session_id, window.seq
                 FROM window JOIN sessions s ON s.n = window.session_n
                 ORDER BY window.score, s.id, window.seq
                 LIMIT {limit} OFFSET {offset})
             SELECT {columns}
             FROM page
             JOIN {fts} ON {fts}.rowid = page.id
             JOIN session_events e ON e.id = page.id
             JOIN sessions s ON s.n = e.session_n
             WHERE {fts} MATCH ?1
             ORDER BY page.score, page.session_id, page.seq"
        ),
    }
}

/// Marks the hits a later rewind hides, reading each session's rewinds once (through
/// their index; most sessions have none).
fn mark_abandoned(conn: &Connection, hits: &mut [SearchHit]) -> Result<()> {
    let mut rewinds: std::collections::HashMap<SessionId, Vec<Event>> =
        std::collections::HashMap::new();
    for h in hits.iter_mut() {
        let list = match rewinds.entry(h.session_id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(super::read::rewinds(conn, h.session_id)?)
            }
        };
        h.abandoned = is_abandoned(list, h.seq);
    }
    Ok(())
}

/// Has FTS5 parse an FTS-syntax query, looking up one rowid that never exists. The search
/// statements join FTS5 to ordinary tables, and SQLite skips a join outright when one of
/// its tables is empty: with no events yet, FTS5 never saw the query and a syntax error
/// answered no hits instead of `bad_query`.
fn check_fts(conn: &Connection, expr: &str, stem: bool) -> Result<()> {
    let sql = if stem {
        "SELECT count(*) FROM session_search_stem WHERE session_search_stem MATCH ?1 AND rowid = 0"
    } else {
        "SELECT count(*) FROM session_search WHERE session_search MATCH ?1 AND rowid = 0"
    };
    conn.prepare_cached(sql)?.query_row([expr], |_| Ok(()))?;
    Ok(())
}

/// In FTS mode the query text is the only part of the statement a client controls, so a
/// plain SQL error (not busy, not I/O, not corruption) is the query's fault.
fn as_bad_query(e: StoreError) -> StoreError {
    match e {
        StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, msg))
            if f.code == ErrorCode::Unknown =>
        {
            let text = msg.unwrap_or_else(|| "malformed query".into());
            StoreError::BadQuery(text.trim_start_matches("fts5: ").to_owned())
        }
        other => other,
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape of the list statement, on a real schema: it prepares and seeks an index;
    /// without a text query it needs no sort (the keyset is read in order). With one, the
    /// planner may start from the matches and sort those, which is bounded by the matches.
    #[test]
    fn every_list_statement_reads_an_index_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("t.db"), Default::default()).unwrap();
        let conn = store.reader().unwrap();
        let cursor = Cursor {
            updated_at: "2026-11-30T00:00:00.000000Z".into(),
            id: SessionId::generate(),
        };
        for filter in [
            ArchivedFilter::Exclude,
            ArchivedFilter::Include,
            ArchivedFilter::Only,
        ] {
            for before in [None, Some(&cursor)] {
                for fts in [None, Some("\"x\"")] {
                    let (sql, args) = list_statement(filter, before, fts, 10);
                    let plan: Vec<String> = conn
                        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                        .unwrap()
                        .query_map(params_from_iter(args), |r| r.get(3))
                        .unwrap()
                        .collect::<Result<_, _>>()
                        .unwrap();
                    let plan = plan.join("; ");
                    assert!(plan.contains("USING"), "{sql}: {plan}");
                    if fts.is_none() {
                        assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
                    }
                }
            }
        }
    }

    /// Newest first is read in FTS5's rowid order and stops at the page: no sort. Best
    /// first bounds what it ranks by a rowid found from the index.
    #[test]
    fn search_statements_read_matches_in_rowid_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("t.db"), Default::default()).unwrap();
        let conn = store.reader().unwrap();
        let plan = |order| {
            let sql = search_statement(
                &SearchQuery {
                    text: "x".into(),
                    limit: 20,
                    offset: 40,
                    order,
                    ..Default::default()
                },
                false,
            );
            let rows: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(params!["\"x\"", "[", "]", SNIPPET_TOKENS], |r| r.get(3))
                .unwrap()
                .collect::<std::result::Result<_, _>>()
                .unwrap();
            rows.join("; ")
        };
        let recent = plan(SearchOrder::Recent);
        assert!(recent.contains("VIRTUAL TABLE"), "{recent}");
        assert!(!recent.contains("TEMP B-TREE"), "{recent}");
        let best = plan(SearchOrder::Relevance);
        // The page's rows go back to FTS5 one rowid each, for their snippets.
        assert!(
            best.contains("SCAN page") && best.contains(":=M1"),
            "{best}"
        );
    }
}
