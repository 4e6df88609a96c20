//! What a session list and a message search ask and get back, on either store: the
//! queries, the page (with its cursor rule) and the hits. The statements are each
//! dialect's (`sqlite/list.rs`, `pg/list.rs`).

use crate::session::cursor::{ArchivedFilter, Cursor};
use crate::session::events::SessionId;
use crate::session::store::types::SessionRow;

/// Tokens of context in a search snippet (FTS5 allows up to 64).
pub const SNIPPET_TOKENS: i64 = 16;

/// How many matches a best-first search ranks: the newest this many. bm25 scores every
/// match it is given, so ranking all of them made a word in 10% of a million events cost
/// ~0.16–0.3 s (and seconds at ten million); ranking a bounded window makes the cost
/// independent of how common the word is (12 ms at 1M, BENCHMARKS.md). 2,000 is 20 of the
/// API's largest pages (100), deeper than people page through a ranked list, and holds
/// every match of most queries: one with at most 2,000 matches is ranked exactly as
/// before. What it costs: a single very common word whose best hit is older than its
/// newest 2,000 matches loses that hit (1 of 7 queries on the labelled set in
/// `tests/it/search.rs`); a second word or [`SearchOrder::Recent`] reaches it.
pub const RANK_WINDOW: u32 = 2_000;

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

impl SessionPage {
    /// The page of `rows` fetched one past `limit` (the extra row says more follow) after
    /// `before`, for either store. The next cursor is its last row's pair, strictly after
    /// `before`: a cursor that stood still would page forever, so one is a bug (asserted).
    pub fn from_fetched(
        mut rows: Vec<SessionRow>,
        limit: u32,
        before: Option<&Cursor>,
    ) -> SessionPage {
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next = match rows.last() {
            Some(last) if more => Some(Cursor {
                updated_at: last.updated_at.clone(),
                id: last.id,
            }),
            _ => None,
        };
        if let (Some(next), Some(before)) = (&next, before) {
            assert!(
                (next.updated_at.as_str(), next.id) < (before.updated_at.as_str(), before.id),
                "the session list's cursor must move: {next:?} is not after {before:?}"
            );
        }
        SessionPage {
            sessions: rows,
            next,
        }
    }
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

/// The order of search hits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SearchOrder {
    /// Best first (bm25), among the newest [`RANK_WINDOW`] matches.
    #[default]
    Relevance,
    /// Newest first, over every match: read in index order and stopped at the page, so a
    /// page costs the same however common the words are.
    Recent,
}

/// A message search.
#[derive(Clone, Debug, Default)]
pub struct SearchQuery {
    pub text: String,
    pub syntax: Syntax,
    pub limit: u32,
    pub offset: u32,
    pub order: SearchOrder,
    /// Match words by their stem (`hostel` finds "hostels"): the porter-tokenized index
    /// on SQLite, the `brain_stem` (Snowball English) column on PostgreSQL.
    pub stem: bool,
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
    /// The event lies in a branch an edit abandoned (SPEC §14): still found, marked.
    pub abandoned: bool,
    /// The other sessions holding a copy of this same event (forks of this hit's session,
    /// see `search_display`), oldest first; empty for most hits.
    pub also_in: Vec<HitCopy>,
}

/// Another session holding a copy of a hit's event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HitCopy {
    pub session_id: SessionId,
    pub title: Option<String>,
    pub abandoned: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(updated_at: &str) -> SessionRow {
        SessionRow {
            id: SessionId::generate(),
            title: None,
            archived: false,
            system: String::new(),
            created_at: updated_at.into(),
            updated_at: updated_at.into(),
        }
    }

    fn cursor_of(r: &SessionRow) -> Cursor {
        Cursor {
            updated_at: r.updated_at.clone(),
            id: r.id,
        }
    }

    #[test]
    fn a_page_goes_on_only_past_its_limit_from_its_last_row() {
        let rows = vec![row("2026-12-03"), row("2026-12-02"), row("2026-12-01")];
        let page = SessionPage::from_fetched(rows.clone(), 2, None);
        assert_eq!(page.sessions, rows[..2]);
        assert_eq!(page.next, Some(cursor_of(&rows[1])));
        let before = Cursor {
            updated_at: "2026-12-04".into(),
            id: rows[0].id,
        };
        let last = SessionPage::from_fetched(rows.clone(), 3, Some(&before));
        assert_eq!((last.sessions.len(), last.next), (3, None));
    }

    #[test]
    #[should_panic(expected = "cursor must move")]
    fn a_cursor_that_would_stand_still_is_a_bug() {
        let rows = vec![row("2026-12-03"), row("2026-12-02")];
        // A store that returned the cursor's own row again would page forever.
        SessionPage::from_fetched(rows.clone(), 1, Some(&cursor_of(&rows[0])));
    }
}
