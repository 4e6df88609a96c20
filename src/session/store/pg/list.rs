//! Listing sessions (keyset pages) and searching messages on PostgreSQL (SPEC §7, §16):
//! the same contract as SQLite's `store/sqlite/list.rs`, on the `search_text` tsvector (`simple`
//! configuration, GIN index, migrations/postgres V2).
//!
//! A plain query is its words, each split into tokens as documents are (see
//! [`snippet`](super::snippet): every run of letters and digits is a token, as SQLite's
//! unicode61 makes them), each word a phrase of its tokens, all of them required, each a
//! whole term (never a prefix), as on SQLite. Past [`MAX_QUERY_NODES`] a plain query keeps
//! its first distinct words ([`capped`]) rather than being refused.
//!
//! Snippets and highlights are computed in Rust from the hit's text
//! ([`snippet::snippet`](super::snippet::snippet)), FTS5's way, never by `ts_headline`.
//!
//! Where the two stores' searches still differ:
//! - SQLite folds diacritics (`remove_diacritics 2`): `zebre` finds `zèbre` there only.
//! - `syntax=fts` is FTS5 syntax on SQLite and `websearch_to_tsquery` syntax here (quoted
//!   phrases, `or`, `-word`; no prefix `*`, no `NEAR`, no column filters), its words split
//!   as documents are ([`clean_websearch`]). That parser accepts any text, so what FTS5
//!   rejects as `bad_query` (`"unbalanced`, `AND`) is a query here; only text PostgreSQL
//!   refuses, a query of negations alone (it would match every event without one matching
//!   word), an empty one and one past [`MAX_QUERY_NODES`] are `bad_query`.
//! - Ranking is `ts_rank_cd` (cover density, divided by 1 + log of the length, so a short
//!   title outranks a long message mentioning a word once, as bm25 ranks them) instead of
//!   bm25: best-first orders agree in kind, not hit for hit.

use std::collections::HashMap;

use postgres::GenericClient;

use super::read::{rewinds, session_columns};
use super::rows::{session_row, to_i64};
use super::snippet::{
    self, MAX_QUERY_NODES, Term, capped, clean_websearch, plain_terms, tsquery_terms,
};
use crate::session::cursor::ArchivedFilter;
use crate::session::events::SessionId;
use crate::session::projection::is_abandoned;
use crate::session::search::{like_pattern, literal_words};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::list::{
    ListQuery, RANK_WINDOW, SearchHit, SearchOrder, SearchQuery, SessionPage, Syntax,
};

/// The first page's cursor: after every real `(updated_at, id)`, so each list statement has
/// one shape with or without a cursor (and the keyset index bounds the scan either way).
const FIRST_PAGE: (&str, uuid::Uuid) = ("infinity", uuid::Uuid::max());

/// The list statements: with or without an archived filter (`archived = $n` is an
/// equality, so `sessions_archived_keyset` serves the ORDER BY; without it
/// `sessions_keyset` does), and with or without a text query. `$1`/`$2`: the cursor.
macro_rules! list_sql {
    ($filter:literal, $query:literal) => {
        concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE (updated_at, id) < ($1::text::timestamptz, $2)",
            $filter,
            $query,
            " ORDER BY sessions.updated_at DESC, sessions.id DESC LIMIT $3"
        )
    };
}
const LIST_ALL: &str = list_sql!("", "");
const LIST_FILTERED: &str = list_sql!(" AND archived = $4", "");
const LIST_ALL_MATCHING: &str = list_sql!(
    "",
    " AND id IN (SELECT session_id FROM session_events
                 WHERE search_text @@ $4::text::tsquery)"
);
const LIST_FILTERED_MATCHING: &str = list_sql!(
    " AND archived = $4",
    " AND id IN (SELECT session_id FROM session_events
                 WHERE search_text @@ $5::text::tsquery)"
);

/// A plain query's terms (`$1`, a text array, each a word's tokens joined by spaces) as
/// one tsquery: each through `phraseto_tsquery`, which reads no syntax and makes a phrase
/// of a term of several tokens (`don't` is `'don' <-> 't'`, as FTS5 reads `"don't"`), the
/// distinct ones ANDed. Answers the query as tsquery text, the part an index can use (`T`
/// when none) and its size in nodes.
macro_rules! parse_plain {
    ($config:literal) => {
        concat!(
            "SELECT q::text, querytree(q), numnode(q) FROM (
         SELECT coalesce(string_agg('(' || p || ')', ' & '), '')::tsquery AS q
         FROM (SELECT DISTINCT phraseto_tsquery('",
            $config,
            "', w)::text AS p
               FROM unnest($1::text[]) AS w) words
         WHERE p <> '') parsed"
        )
    };
}
const PARSE_PLAIN: &str = parse_plain!("simple");
/// [`PARSE_PLAIN`] for a stemmed search: each word stemmed by `brain_stem` (V18).
const PARSE_PLAIN_STEM: &str = parse_plain!("brain_stem");
/// An FTS query (`$1`) in `websearch_to_tsquery` syntax, answered as [`PARSE_PLAIN`].
const PARSE_FTS: &str =
    "SELECT q::text, querytree(q), numnode(q) FROM websearch_to_tsquery('simple', $1) AS q";
/// [`PARSE_FTS`] for a stemmed search.
const PARSE_FTS_STEM: &str =
    "SELECT q::text, querytree(q), numnode(q) FROM websearch_to_tsquery('brain_stem', $1) AS q";

/// The matches that can be hits (`$1` the tsquery, over column `$col`: `search_text`, or
/// `search_stem` for a stemmed search). A checkpoint of an attempt that went on to
/// complete is left out, as on SQLite: its answer holds the same text. `$lit` is a text
/// array of `ILIKE` patterns the text must all match (the query's
/// [literals](crate::session::search::literal_words)); an empty one matches all.
macro_rules! candidates {
    ($col:literal, $lit:literal) => {
        concat!(
            "session_events e
         WHERE e.",
            $col,
            " @@ $1::text::tsquery
           AND NOT (e.kind = 'pending_state' AND EXISTS (
               SELECT 1 FROM session_events a
               WHERE a.session_id = e.session_id AND a.seq > e.seq
                 AND a.kind = 'assistant_turn'
                 AND brain_field(a.payload, 'turn') = brain_field(e.payload, 'turn')
                 AND brain_field(a.payload, 'attempt') = brain_field(e.payload, 'attempt')))
           AND (cardinality(",
            $lit,
            "::text[]) = 0 OR brain_field(e.payload, CASE e.kind
                 WHEN 'compaction_applied' THEN 'summary'
                 WHEN 'session_started' THEN 'title'
                 WHEN 'session_titled' THEN 'title'
                 ELSE 'text' END) ILIKE ALL (",
            $lit,
            "::text[]))"
        )
    };
}

/// A page's rows, with each hit's payload: its snippet is cut from the text in Rust.
macro_rules! page_rows {
    ($order:literal) => {
        concat!(
            "SELECT e.session_id::text, s.title, e.seq, e.kind, ",
            $crate::session::store::pg::rows::ts_text!("e.created_at"),
            ", e.payload::text
             FROM page
             JOIN session_events e ON e.id = page.id
             JOIN sessions s ON s.id = e.session_id
             ORDER BY ",
            $order
        )
    };
}

/// Newest first by the event's time (ties by session, then seq, also newest first: the
/// order SQLite's time keys give), stopped at the page (`$2` limit, `$3` offset; `$4` the
/// literals). GIN gives no order: PostgreSQL either sorts the matches (top-N) or walks
/// `session_events_newest` backwards and stops at the page, whichever it plans cheaper.
macro_rules! search_recent {
    ($col:literal) => {
        concat!(
            "WITH page AS (SELECT e.id, e.created_at, e.session_id, e.seq FROM ",
            candidates!($col, "$4"),
            " ORDER BY e.created_at DESC, e.session_id DESC, e.seq DESC LIMIT $2 OFFSET $3) ",
            page_rows!("page.created_at DESC, page.session_id DESC, page.seq DESC")
        )
    };
}
const SEARCH_RECENT: &str = search_recent!("search_text");
const SEARCH_RECENT_STEM: &str = search_recent!("search_stem");

/// Best first: the newest `$4` ([`RANK_WINDOW`]) matches are scored (only they: the score
/// is taken after the window's LIMIT, and reads the tsvector, not the text), sorted by
/// score, then session and seq for ties as on SQLite, and the page (`$2`, `$3`) read;
/// `$5` the literals.
macro_rules! search_relevance {
    ($col:literal) => {
        concat!(
            "WITH newest AS (SELECT e.id, e.session_id, e.seq, e.",
            $col,
            " AS search_text FROM ",
            candidates!($col, "$5"),
            " ORDER BY e.created_at DESC, e.session_id DESC, e.seq DESC LIMIT $4),
     page AS (SELECT id, session_id, seq, ts_rank_cd(search_text, $1::text::tsquery, 1) AS score
              FROM newest ORDER BY score DESC, session_id, seq LIMIT $2 OFFSET $3) ",
            page_rows!("page.score DESC, page.session_id, page.seq")
        )
    };
}
const SEARCH_RELEVANCE: &str = search_relevance!("search_text");
const SEARCH_RELEVANCE_STEM: &str = search_relevance!("search_stem");

/// A plain query's words: split at whitespace, control characters separating words as
/// in [`crate::session::search::plain_to_fts`] (and PostgreSQL refuses a NUL).
pub fn plain_words(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A parsed query: its tsquery text (empty when no word had a token), whether an index
/// can use it (not when it only leaves words out), its size in nodes, and the terms its
/// hits' highlights cover.
struct Parsed {
    tsquery: String,
    indexable: bool,
    nodes: i32,
    terms: Vec<Term>,
}

fn parse(c: &mut impl GenericClient, syntax: Syntax, text: &str, stem: bool) -> Result<Parsed> {
    let (row, terms) = match syntax {
        Syntax::Plain => {
            let terms = capped(plain_terms(&plain_words(text)));
            let phrases: Vec<String> = terms.iter().map(|t| t.join(" ")).collect();
            let sql = if stem { PARSE_PLAIN_STEM } else { PARSE_PLAIN };
            (c.query_one(sql, &[&phrases])?, terms)
        }
        Syntax::Fts => {
            let sql = if stem { PARSE_FTS_STEM } else { PARSE_FTS };
            let row = c
                .query_one(sql, &[&clean_websearch(text)])
                .map_err(as_bad_query)?;
            let tsquery: String = row.try_get(0)?;
            let terms = tsquery_terms(&tsquery);
            (row, terms)
        }
    };
    let tree: String = row.try_get(1)?;
    Ok(Parsed {
        tsquery: row.try_get(0)?,
        indexable: tree != "T",
        nodes: row.try_get(2)?,
        terms,
    })
}

/// A page of sessions, newest first by `(updated_at, id)`.
pub fn list_sessions(c: &mut impl GenericClient, q: &ListQuery) -> Result<SessionPage> {
    let words = q.query.as_deref().map(plain_words).unwrap_or_default();
    let filter = q.archived.unwrap_or(if q.query.is_some() {
        ArchivedFilter::Include
    } else {
        ArchivedFilter::Exclude
    });
    let nothing = SessionPage {
        sessions: vec![],
        next: None,
    };
    let text = match &q.query {
        // A query of blanks matches nothing rather than everything.
        Some(_) if words.is_empty() => return Ok(nothing),
        Some(t) => match parse(c, Syntax::Plain, t, false)? {
            // No word had a token (`*`): nothing matches.
            p if p.tsquery.is_empty() => return Ok(nothing),
            p => Some(p.tsquery),
        },
        None => None,
    };
    let (at, id) = match &q.before {
        Some(c) => (c.updated_at.as_str(), c.id.as_uuid()),
        None => FIRST_PAGE,
    };
    let fetch = i64::from(q.limit) + 1; // one more than asked: are there more?
    let archived = filter == ArchivedFilter::Only;
    let rows = match (filter, &text) {
        (ArchivedFilter::Include, None) => c.query(LIST_ALL, &[&at, &id, &fetch])?,
        (ArchivedFilter::Include, Some(t)) => c.query(LIST_ALL_MATCHING, &[&at, &id, &fetch, t])?,
        (_, None) => c.query(LIST_FILTERED, &[&at, &id, &fetch, &archived])?,
        (_, Some(t)) => c.query(LIST_FILTERED_MATCHING, &[&at, &id, &fetch, &archived, t])?,
    };
    let sessions = rows.iter().map(session_row).collect::<Result<Vec<_>>>()?;
    Ok(SessionPage::from_fetched(
        sessions,
        q.limit,
        q.before.as_ref(),
    ))
}

/// Messages, answers, partials, summaries and titles matching a query, best first (or
/// newest first), with plain-text snippets and highlight ranges.
pub fn search(c: &mut impl GenericClient, q: &SearchQuery) -> Result<Vec<SearchHit>> {
    match q.syntax {
        Syntax::Plain if plain_words(&q.text).is_empty() => return Ok(vec![]),
        Syntax::Fts if q.text.trim().is_empty() => {
            return Err(StoreError::BadQuery("the search is empty".into()));
        }
        _ => {}
    }
    let parsed = parse(c, q.syntax, &q.text, q.stem)?;
    if parsed.tsquery.is_empty() {
        // No word had a token (`*`, a word over PostgreSQL's 2,047 characters).
        return Ok(vec![]);
    }
    if !parsed.indexable {
        return Err(StoreError::BadQuery(
            "the search needs a word that must match, not only words to leave out".into(),
        ));
    }
    if usize::try_from(parsed.nodes).unwrap_or(usize::MAX) > MAX_QUERY_NODES {
        return Err(StoreError::BadQuery(format!(
            "the search is too long (at most {MAX_QUERY_NODES} words and operators)"
        )));
    }
    let tsquery = parsed.tsquery;
    let (limit, offset) = (i64::from(q.limit), i64::from(q.offset));
    let literals: Vec<String> = match q.syntax {
        Syntax::Plain => literal_words(&q.text)
            .iter()
            .map(|l| like_pattern(l))
            .collect(),
        Syntax::Fts => vec![],
    };
    let rows = match (q.order, q.stem) {
        (SearchOrder::Recent, stem) => c.query(
            if stem {
                SEARCH_RECENT_STEM
            } else {
                SEARCH_RECENT
            },
            &[&tsquery, &limit, &offset, &literals],
        )?,
        (SearchOrder::Relevance, stem) => c.query(
            if stem {
                SEARCH_RELEVANCE_STEM
            } else {
                SEARCH_RELEVANCE
            },
            &[
                &tsquery,
                &limit,
                &offset,
                &to_i64(u64::from(RANK_WINDOW))?,
                &literals,
            ],
        )?,
    };
    let match_token = if q.stem {
        snippet::stem_equal
    } else {
        |a: &str, b: &str| a == b
    };
    let mut hits = Vec::with_capacity(rows.len());
    for r in rows {
        let sid: String = r.try_get(0)?;
        let session_id = sid
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("session id {sid:?} is not a UUID")))?;
        let seq: i64 = r.try_get(2)?;
        let kind: String = r.try_get(3)?;
        let payload: String = r.try_get(5)?;
        let (snippet, highlights) =
            snippet::snippet_by(&document(&kind, &payload)?, &parsed.terms, match_token);
        hits.push(SearchHit {
            session_id,
            title: r.try_get(1)?,
            seq: u64::try_from(seq)
                .map_err(|_| StoreError::Corrupt(format!("a negative seq ({seq})")))?,
            kind,
            snippet,
            highlights,
            created_at: r.try_get(4)?,
            abandoned: false,
            also_in: vec![],
        });
    }
    mark_abandoned(c, &mut hits)?;
    Ok(hits)
}

/// The searchable text of an event of `kind` (its payload's JSON text), as V9's
/// `search_text` reads it.
fn document(kind: &str, payload: &str) -> Result<String> {
    use crate::session::events::kind as k;
    let field = match kind {
        k::COMPACTION_APPLIED => "summary",
        k::SESSION_STARTED | k::SESSION_TITLED => "title",
        _ => "text",
    };
    let value: serde_json::Value = serde_json::from_str(payload)
        .map_err(|e| StoreError::Corrupt(format!("a {kind} payload is not JSON: {e}")))?;
    Ok(value
        .get(field)
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned())
}

/// Marks the hits a later rewind hides, reading each session's rewinds once.
fn mark_abandoned(c: &mut impl GenericClient, hits: &mut [SearchHit]) -> Result<()> {
    let mut rewinds_of: HashMap<SessionId, Vec<crate::session::events::Event>> = HashMap::new();
    for h in hits.iter_mut() {
        let list = match rewinds_of.entry(h.session_id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(rewinds(c, h.session_id)?),
        };
        h.abandoned = is_abandoned(list, h.seq);
    }
    Ok(())
}

/// In FTS mode the query text is the only thing a client controls in the parse statement,
/// so an error PostgreSQL reports about it (a syntax error, or a data exception such as a
/// NUL byte) is the query's fault: answered in plain words, the server's text logged (it
/// is internal, SPEC §7). Anything else (connection, server) stays what it is.
fn as_bad_query(e: postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) if db.code().code().starts_with("22") || db.code().code() == "42601" => {
            log::info!("a search query PostgreSQL refused: {}", db.message());
            StoreError::BadQuery(BAD_FTS_QUERY.into())
        }
        _ => e.into(),
    }
}

/// What a client hears about an FTS query PostgreSQL could not read.
pub const BAD_FTS_QUERY: &str =
    "the search could not be read as a query (it may hold a character no text can, as NUL)";

#[cfg(test)]
#[path = "list_tests.rs"]
mod tests;
