//! Listing sessions (keyset pages) and searching messages on PostgreSQL (SPEC §7, §16):
//! the same contract as SQLite's `store/list.rs`, on the `search_text` tsvector (`simple`
//! configuration, GIN index, migrations/postgres V2).
//!
//! A plain query is its words, each parsed on its own with no syntax (see
//! [`PARSE_PLAIN`]), all of them required, each a whole term (never a prefix), as on
//! SQLite.
//!
//! Where the two stores' searches differ, it is the tokenizers (FTS5 `unicode61` against
//! PostgreSQL's default text-search parser), not the queries:
//! - PostgreSQL keeps compound tokens whole *and* splits them: `e-mail` is indexed as
//!   `e-mail`, `e`, `mail`; a query word is parsed the same way, so `e-mail` finds
//!   `e-mail` on both, but finds `e mail` only on SQLite. Emails, hosts, URLs, file names
//!   and decimals are single tokens on PostgreSQL: `foo` finds `foo.txt` and `example`
//!   finds `bob@example.com` only on SQLite.
//! - SQLite folds diacritics (`remove_diacritics 2`): `zebre` finds `zèbre` there only.
//! - `syntax=fts` is FTS5 syntax on SQLite and `websearch_to_tsquery` syntax here (quoted
//!   phrases, `or`, `-word`; no prefix `*`, no `NEAR`, no column filters). That parser
//!   accepts any text, so what FTS5 rejects as `bad_query` (`"unbalanced`, `AND`) is a
//!   query here; only text PostgreSQL refuses (a NUL), a query of negations alone (it
//!   would match every event without one matching word) and an empty query are
//!   `bad_query`.
//! - A query past [`MAX_QUERY_NODES`] after tokenizing is `bad_query`, plain or not.
//! - Ranking is `ts_rank_cd` (cover density, divided by 1 + log of the length, so a short
//!   title outranks a long message mentioning a word once, as bm25 ranks them) instead of
//!   bm25: best-first orders agree in kind, not hit for hit.

use std::collections::HashMap;

use postgres::GenericClient;

use super::read::{rewinds, session_columns};
use super::rows::{session_row, to_i64};
use crate::session::cursor::{ArchivedFilter, Cursor};
use crate::session::events::SessionId;
use crate::session::projection::is_abandoned;
use crate::session::search::{markers, parse_marked};
use crate::session::store::list::SNIPPET_TOKENS;
use crate::session::store::{
    ListQuery, RANK_WINDOW, Result, SearchHit, SearchOrder, SearchQuery, SessionPage, StoreError,
    Syntax,
};

/// The ellipsis a snippet cut out of a longer text starts or ends with, as FTS5's.
const ELLIPSIS: &str = "…";

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

/// A plain query's words (`$1`, a text array) as one tsquery: each word through
/// `phraseto_tsquery`, which reads no syntax at all and makes a phrase of a word with
/// several tokens (`don't` is `'don' <-> 't'`, as FTS5 reads `"don't"`); a word with no
/// token (`*`) is dropped, as FTS5 drops one; the distinct ones ANDed. Distinct after
/// tokenizing: `otter otter! (otter` is one term, so a query repeating a word cannot make
/// the ranking and the headlines (whose cost grows with the square of the terms) slow.
/// Answers the query as tsquery text, the part an index can use (`T` when none) and
/// its size in nodes.
const PARSE_PLAIN: &str = "SELECT q::text, querytree(q), numnode(q) FROM (
         SELECT coalesce(string_agg('(' || p || ')', ' & '), '')::tsquery AS q
         FROM (SELECT DISTINCT phraseto_tsquery('simple', w)::text AS p
               FROM unnest($1::text[]) AS w) words
         WHERE p <> '') parsed";
/// An FTS query (`$1`) in `websearch_to_tsquery` syntax, answered as [`PARSE_PLAIN`].
const PARSE_FTS: &str =
    "SELECT q::text, querytree(q), numnode(q) FROM websearch_to_tsquery('simple', $1) AS q";

/// The most nodes (terms and operators) a query may have after tokenizing: a headline's
/// cost grows with the square of the terms (2,000 repeats of one word took 34 s for one
/// short snippet), and a person's query is far below this. Plain queries reach it only
/// with about 128 distinct words, or one word of as many parts (`x-x-x-…`), which SQLite
/// accepts.
pub const MAX_QUERY_NODES: i32 = 255;

/// The searchable text of an event `e`, as V2's `search_text` takes it.
macro_rules! document {
    () => {
        "coalesce(CASE e.kind
             WHEN 'user_message'       THEN e.payload ->> 'text'
             WHEN 'assistant_turn'     THEN e.payload ->> 'text'
             WHEN 'pending_state'      THEN e.payload ->> 'text'
             WHEN 'compaction_applied' THEN e.payload ->> 'summary'
             WHEN 'session_started'    THEN e.payload ->> 'title'
             WHEN 'session_titled'     THEN e.payload ->> 'title'
         END, '')"
    };
}

/// The matches that can be hits (`$1` the tsquery). A checkpoint of an attempt that went
/// on to complete is left out, as on SQLite: its answer holds the same text.
macro_rules! candidates {
    () => {
        "session_events e
         WHERE e.search_text @@ $1::text::tsquery
           AND NOT (e.kind = 'pending_state' AND EXISTS (
               SELECT 1 FROM session_events a
               WHERE a.session_id = e.session_id AND a.seq > e.seq
                 AND a.kind = 'assistant_turn'
                 AND a.payload ->> 'turn' = e.payload ->> 'turn'
                 AND a.payload ->> 'attempt' = e.payload ->> 'attempt'))"
    };
}

/// A page's rows with their snippets (`page` holds `id` and the order's columns; `$2`
/// the `ts_headline` options, `$3`/`$4` the markers). Only the page's rows are
/// headlined. The text before (after) the snippet comes back only when it holds no token
/// (punctuation the headline left out, as a closing `.`), else NULL: the snippet was cut
/// there, an ellipsis is due. Asking the parser that made the tokens gives the ellipses
/// FTS5's meaning (the snippet does not start at the text's first token, or end at its
/// last), and a long text never travels whole.
macro_rules! page_rows {
    ($order:literal) => {
        concat!(
            "SELECT e.session_id::text, s.title, e.seq, e.kind, ",
            $crate::session::store::pg::rows::ts_text!("e.created_at"),
            ", h.marked,
                    CASE WHEN length(to_tsvector('simple', p.lead)) = 0 THEN p.lead END,
                    CASE WHEN length(to_tsvector('simple', p.trail)) = 0 THEN p.trail END
             FROM page
             JOIN session_events e ON e.id = page.id
             JOIN sessions s ON s.id = e.session_id
             CROSS JOIN LATERAL (SELECT ",
            document!(),
            " AS doc) d
             CROSS JOIN LATERAL (SELECT ts_headline('simple', d.doc, $1::text::tsquery, $2) AS marked) h
             CROSS JOIN LATERAL (SELECT replace(replace(h.marked, $3, ''), $4, '') AS plain) x
             CROSS JOIN LATERAL (SELECT strpos(d.doc, x.plain) AS at) f
             CROSS JOIN LATERAL (SELECT
                 CASE WHEN f.at > 0 THEN left(d.doc, f.at - 1) ELSE '' END AS lead,
                 CASE WHEN f.at > 0 THEN substr(d.doc, f.at + length(x.plain)) ELSE '' END AS trail) p
             ORDER BY ",
            $order
        )
    };
}

/// Newest first: the matches in append order, stopped at the page (`$5` limit, `$6`
/// offset). GIN gives no order, so PostgreSQL sorts the matches (top-N) first.
const SEARCH_RECENT: &str = concat!(
    "WITH page AS (SELECT e.id FROM ",
    candidates!(),
    " ORDER BY e.id DESC LIMIT $5 OFFSET $6) ",
    page_rows!("e.id DESC")
);

/// Best first: the newest `$7` ([`RANK_WINDOW`]) matches are scored (only they: the score
/// is taken after the window's LIMIT), sorted by score, then session and seq for ties as
/// on SQLite, and the page (`$5`, `$6`) headlined.
const SEARCH_RELEVANCE: &str = concat!(
    "WITH newest AS (SELECT e.id, e.session_id, e.seq, e.search_text FROM ",
    candidates!(),
    " ORDER BY e.id DESC LIMIT $7),
     page AS (SELECT id, session_id, seq, ts_rank_cd(search_text, $1::text::tsquery, 1) AS score
              FROM newest ORDER BY score DESC, session_id, seq LIMIT $5 OFFSET $6) ",
    page_rows!("page.score DESC, page.session_id, page.seq")
);

/// A plain query's words: split at whitespace, control characters separating words as
/// in [`crate::session::search::plain_to_fts`] (and PostgreSQL refuses a NUL).
pub fn plain_words(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A parsed query: its tsquery text (empty when no word had a token), whether an index
/// can use it (not when it only leaves words out), and its size in nodes.
struct Parsed {
    tsquery: String,
    indexable: bool,
    nodes: i32,
}

fn parse(c: &mut impl GenericClient, syntax: Syntax, text: &str) -> Result<Parsed> {
    let row = match syntax {
        Syntax::Plain => c.query_one(PARSE_PLAIN, &[&plain_words(text)])?,
        Syntax::Fts => c.query_one(PARSE_FTS, &[&text]).map_err(as_bad_query)?,
    };
    let tree: String = row.try_get(1)?;
    Ok(Parsed {
        tsquery: row.try_get(0)?,
        indexable: tree != "T",
        nodes: row.try_get(2)?,
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
        Some(t) => match parse(c, Syntax::Plain, t)? {
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
    let mut sessions = rows.iter().map(session_row).collect::<Result<Vec<_>>>()?;
    let more = sessions.len() > q.limit as usize;
    sessions.truncate(q.limit as usize);
    let next = match sessions.last() {
        Some(last) if more => Some(Cursor {
            updated_at: last.updated_at.clone(),
            id: last.id,
        }),
        _ => None,
    };
    Ok(SessionPage { sessions, next })
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
    let parsed = parse(c, q.syntax, &q.text)?;
    if parsed.tsquery.is_empty() {
        // No word had a token (`*`, a word over PostgreSQL's 2,047 characters).
        return Ok(vec![]);
    }
    if !parsed.indexable {
        return Err(StoreError::BadQuery(
            "the search needs a word that must match, not only words to leave out".into(),
        ));
    }
    if parsed.nodes > MAX_QUERY_NODES {
        return Err(StoreError::BadQuery(format!(
            "the search is too long (at most {MAX_QUERY_NODES} words and operators)"
        )));
    }
    let tsquery = parsed.tsquery;
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let (open, close) = markers(&nonce);
    // Option values are quoted; the markers hold no `"` (private-use characters, hex).
    let options = format!(
        "StartSel=\"{open}\", StopSel=\"{close}\", MaxWords={SNIPPET_TOKENS}, MinWords={}, \
         ShortWord=0, MaxFragments=1",
        SNIPPET_TOKENS / 2
    );
    let (limit, offset) = (i64::from(q.limit), i64::from(q.offset));
    let rows = match q.order {
        SearchOrder::Recent => c.query(
            SEARCH_RECENT,
            &[&tsquery, &options, &open, &close, &limit, &offset],
        )?,
        SearchOrder::Relevance => c.query(
            SEARCH_RELEVANCE,
            &[
                &tsquery,
                &options,
                &open,
                &close,
                &limit,
                &offset,
                &to_i64(u64::from(RANK_WINDOW))?,
            ],
        )?,
    };
    let mut hits = Vec::with_capacity(rows.len());
    for r in rows {
        let sid: String = r.try_get(0)?;
        let session_id = sid
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("session id {sid:?} is not a UUID")))?;
        let seq: i64 = r.try_get(2)?;
        let marked: String = r.try_get(5)?;
        let lead: Option<String> = r.try_get(6)?;
        let trail: Option<String> = r.try_get(7)?;
        let marked = format!(
            "{}{marked}{}",
            lead.as_deref().map_or(ELLIPSIS, str::trim_start),
            trail.as_deref().map_or(ELLIPSIS, str::trim_end)
        );
        let (snippet, highlights) = parse_marked(&marked, &open, &close);
        let highlights = join_word_parts(&snippet, highlights);
        hits.push(SearchHit {
            session_id,
            title: r.try_get(1)?,
            seq: u64::try_from(seq)
                .map_err(|_| StoreError::Corrupt(format!("a negative seq ({seq})")))?,
            kind: r.try_get(3)?,
            snippet,
            highlights,
            created_at: r.try_get(4)?,
            abandoned: false,
        });
    }
    mark_abandoned(c, &mut hits)?;
    Ok(hits)
}

/// Characters that join the parts of one word (`e-mail`, `don't`): PostgreSQL highlights
/// each part of a matched word on its own (`[e]-[mail]`); FTS5 highlights the phrase it
/// matched (`[e-mail]`). Joining ranges separated by these alone gives the same meaning.
const WORD_JOINERS: [char; 3] = ['-', '\'', '\u{2019}'];

/// `ranges` (sorted, as [`parse_marked`] gives them) with neighbours separated only by
/// [`WORD_JOINERS`] joined into one.
fn join_word_parts(snippet: &str, ranges: Vec<[usize; 2]>) -> Vec<[usize; 2]> {
    let chars: Vec<char> = snippet.chars().collect();
    let mut out: Vec<[usize; 2]> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last)
                if r[0] > last[1]
                    && chars
                        .get(last[1]..r[0])
                        .is_some_and(|gap| gap.iter().all(|c| WORD_JOINERS.contains(c))) =>
            {
                last[1] = r[1];
            }
            _ => out.push(r),
        }
    }
    out
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
/// NUL byte) is the query's fault; anything else (connection, server) stays what it is.
fn as_bad_query(e: postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) if db.code().code().starts_with("22") || db.code().code() == "42601" => {
            StoreError::BadQuery(db.message().to_owned())
        }
        _ => e.into(),
    }
}

#[cfg(test)]
#[path = "list_tests.rs"]
mod tests;
