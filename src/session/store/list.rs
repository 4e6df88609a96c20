//! Listing sessions (keyset pages) and searching messages (FTS5).

use rusqlite::{Connection, ErrorCode, params};

use super::read::session_row;
use super::{Result, SessionRow, Store, StoreError};
use crate::session::cursor::{ArchivedFilter, Cursor};
use crate::session::events::SessionId;
use crate::session::search::{markers, parse_marked, plain_to_fts};

/// Tokens of context in a search snippet (FTS5 allows up to 64).
pub const SNIPPET_TOKENS: i64 = 16;

/// What to list.
#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    /// Start strictly after this position; `None` for the first page.
    pub before: Option<Cursor>,
    pub limit: u32,
    /// `None`: exclude archived sessions, unless there is a text query, which includes
    /// them (a search should find everything).
    pub archived: Option<ArchivedFilter>,
    /// Plain text matched against titles and message text.
    pub query: Option<String>,
}

/// One page of the session list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionPage {
    pub sessions: Vec<SessionRow>,
    /// The last row's position, when more sessions follow.
    pub next: Option<Cursor>,
}

/// How a search query is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Syntax {
    /// Words, all of which must match; nothing is syntax.
    #[default]
    Plain,
    /// FTS5 query syntax, passed through; a syntax error is [`StoreError::BadQuery`].
    Fts,
}

/// A message search.
#[derive(Clone, Debug, Default)]
pub struct SearchQuery {
    pub text: String,
    pub syntax: Syntax,
    pub limit: u32,
    pub offset: u32,
}

/// One search result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchHit {
    pub session_id: SessionId,
    /// The session's current title.
    pub title: Option<String>,
    pub seq: u64,
    pub kind: String,
    /// Plain text around the match.
    pub snippet: String,
    /// `[start, end)` character ranges of `snippet` that matched.
    pub highlights: Vec<[usize; 2]>,
    pub created_at: String,
}

// Four fixed statements rather than SQL assembled at run time: with or without a cursor,
// with or without a text query. The archived filter is a range of the 0/1 column.
const LIST_FIRST: &str = "SELECT id, title, archived, system, created_at, updated_at
    FROM sessions WHERE archived BETWEEN ?1 AND ?2
    ORDER BY updated_at DESC, id DESC LIMIT ?3";
const LIST_AFTER: &str = "SELECT id, title, archived, system, created_at, updated_at
    FROM sessions WHERE archived BETWEEN ?1 AND ?2 AND (updated_at, id) < (?4, ?5)
    ORDER BY updated_at DESC, id DESC LIMIT ?3";
const MATCHING: &str = "id IN (SELECT e.session_id FROM session_search
    JOIN session_events e ON e.id = session_search.rowid WHERE session_search MATCH ?6)";

impl Store {
    /// A page of sessions, newest first by `(updated_at, id)`.
    pub fn list_sessions(&self, q: &ListQuery) -> Result<SessionPage> {
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
        let (lo, hi) = filter.archived_range();
        let fetch = i64::from(q.limit) + 1; // one more than asked: are there more?
        let (at, id) = match &q.before {
            Some(c) => (Some(c.updated_at.as_str()), Some(c.id.to_string())),
            None => (None, None),
        };
        let sql = match (&q.before, &fts) {
            (None, None) => LIST_FIRST.to_owned(),
            (Some(_), None) => LIST_AFTER.to_owned(),
            (None, Some(_)) => with_match(LIST_FIRST),
            (Some(_), Some(_)) => with_match(LIST_AFTER),
        };
        let conn = self.reader()?;
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut rows = Vec::new();
        let mut bind = params![lo, hi, fetch, at, id, fts].to_vec();
        // Each statement uses a prefix of the parameters; bind exactly those it names.
        bind.truncate(stmt.parameter_count());
        let mapped = stmt.query_map(bind.as_slice(), session_row)?;
        for row in mapped {
            rows.push(row??);
        }
        let more = rows.len() > q.limit as usize;
        rows.truncate(q.limit as usize);
        let next = match rows.last() {
            Some(last) if more => Some(Cursor {
                updated_at: last.updated_at.clone(),
                id: last.id,
            }),
            _ => None,
        };
        Ok(SessionPage {
            sessions: rows,
            next,
        })
    }

    /// Messages, answers, partials, summaries and titles matching a query, best first.
    pub fn search(&self, q: &SearchQuery) -> Result<Vec<SearchHit>> {
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
        let conn = self.reader()?;
        run_search(&conn, &expr, q).map_err(|e| match q.syntax {
            Syntax::Fts => as_bad_query(e),
            Syntax::Plain => e,
        })
    }
}

fn with_match(base: &str) -> String {
    base.replacen("ORDER BY", &format!("AND {MATCHING} ORDER BY"), 1)
}

fn run_search(conn: &Connection, expr: &str, q: &SearchQuery) -> Result<Vec<SearchHit>> {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let (open, close) = markers(&nonce);
    let mut stmt = conn.prepare_cached(
        "SELECT e.session_id, s.title, e.seq, e.kind, e.created_at,
                snippet(session_search, 0, ?2, ?3, '…', ?4)
         FROM session_search
         JOIN session_events e ON e.id = session_search.rowid
         JOIN sessions s ON s.id = e.session_id
         WHERE session_search MATCH ?1
         ORDER BY session_search.rank, e.session_id, e.seq
         LIMIT ?5 OFFSET ?6",
    )?;
    let rows = stmt.query_map(
        params![expr, open, close, SNIPPET_TOKENS, q.limit, q.offset],
        |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, u64>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, Option<String>>(5)?,
            ))
        },
    )?;
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
        });
    }
    Ok(hits)
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

    /// The columns `session_row` maps, in its order.
    const COLUMNS: &str = "id, title, archived, system, created_at, updated_at";

    #[test]
    fn list_statements_name_the_columns_they_map() {
        assert!(LIST_FIRST.contains(COLUMNS) && LIST_AFTER.contains(COLUMNS));
        let sql = with_match(LIST_AFTER);
        assert!(sql.find("MATCH ?6)") < sql.find("ORDER BY"), "{sql}");
    }
}
