//! The session list: keyset paging by (updated_at DESC, id DESC), ties included, the
//! archived filter, and the text query.

use std::collections::HashSet;

use brain::clock::Clock;
use brain::session::cursor::ArchivedFilter;
use brain::session::events::TitledBy;
use brain::session::store::ListQuery;
use brain::session::{SessionId, SessionRow, Store};
use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

use crate::support::*;

fn start() -> Timestamp {
    "2026-11-30T00:00:00Z".parse().unwrap()
}

/// Every page, following `next` until it is `None`.
fn page_through(store: &Store, mut q: ListQuery) -> Vec<SessionRow> {
    let mut all = Vec::new();
    for _ in 0..10_000 {
        let page = store.list_sessions(&q).unwrap();
        assert!(page.sessions.len() <= q.limit as usize);
        all.extend(page.sessions);
        match page.next {
            Some(next) => q.before = Some(next),
            None => return all,
        }
    }
    panic!("paging never ended");
}

/// What the list must be: sorted by (updated_at, id) descending.
fn expected_order(mut rows: Vec<SessionRow>) -> Vec<SessionId> {
    rows.sort_by(|a, b| (&b.updated_at, b.id).cmp(&(&a.updated_at, a.id)));
    rows.into_iter().map(|r| r.id).collect()
}

fn ids(rows: &[SessionRow]) -> Vec<SessionId> {
    rows.iter().map(|r| r.id).collect()
}

#[test]
fn ties_across_page_boundaries_come_back_exactly_once_in_order() {
    let db = TempDb::new();
    let clock = Clock::manual(start());
    let store = db.open_with(clock.clone());
    let mut rows = Vec::new();
    for _ in 0..7 {
        rows.push(store.create_session(None, String::new()).unwrap()); // all at one instant
    }
    clock.advance(SignedDuration::from_secs(1));
    for _ in 0..3 {
        rows.push(store.create_session(None, String::new()).unwrap());
    }
    assert_eq!(
        rows.iter()
            .map(|r| &r.updated_at)
            .collect::<HashSet<_>>()
            .len(),
        2
    );
    for limit in 1..=11 {
        let got = page_through(
            &store,
            ListQuery {
                limit,
                ..ListQuery::default()
            },
        );
        assert_eq!(ids(&got), expected_order(rows.clone()), "page size {limit}");
    }
}

#[test]
fn next_is_null_on_the_last_page_and_a_full_last_page_ends_cleanly() {
    let db = TempDb::new();
    let store = db.open();
    for _ in 0..4 {
        store.create_session(None, String::new()).unwrap();
    }
    let q = |limit| ListQuery {
        limit,
        ..ListQuery::default()
    };
    let page = store.list_sessions(&q(4)).unwrap();
    assert_eq!(page.sessions.len(), 4);
    assert_eq!(page.next, None, "exactly a page: nothing follows");
    let page = store.list_sessions(&q(3)).unwrap();
    let next = page.next.expect("one more follows");
    assert_eq!(next.id, page.sessions[2].id);
    assert_eq!(next.updated_at, page.sessions[2].updated_at);
    assert!(store.list_sessions(&q(0)).unwrap().sessions.is_empty());
}

#[test]
fn activity_moves_a_session_to_the_top_but_renames_and_archiving_do_not() {
    let db = TempDb::new();
    let clock = Clock::manual(start());
    let store = db.open_with(clock.clone());
    let old = store.create_session(None, String::new()).unwrap().id;
    clock.advance(SignedDuration::from_secs(1));
    let new = store.create_session(None, String::new()).unwrap().id;
    let order = |store: &Store| {
        ids(&page_through(
            store,
            ListQuery {
                limit: 10,
                archived: Some(ArchivedFilter::Include),
                ..ListQuery::default()
            },
        ))
    };
    assert_eq!(order(&store), vec![new, old]);
    clock.advance(SignedDuration::from_secs(1));
    store.rename(old, "renamed".into(), TitledBy::User).unwrap();
    store.set_archived(old, true).unwrap();
    store.append(old, &memory(2, 1)).unwrap();
    assert_eq!(order(&store), vec![new, old], "no reordering");
    store.append(old, &user("hello again")).unwrap();
    assert_eq!(order(&store), vec![old, new]);
}

#[test]
fn archived_filter_excludes_includes_or_keeps_only_archived() {
    let db = TempDb::new();
    let store = db.open();
    let live = store
        .create_session(Some("live".into()), String::new())
        .unwrap()
        .id;
    let gone = store
        .create_session(Some("gone".into()), String::new())
        .unwrap()
        .id;
    store.set_archived(gone, true).unwrap();
    let list = |archived| {
        let rows = page_through(
            &store,
            ListQuery {
                limit: 10,
                archived,
                ..ListQuery::default()
            },
        );
        ids(&rows).into_iter().collect::<HashSet<_>>()
    };
    assert_eq!(list(None), HashSet::from([live]));
    assert_eq!(list(Some(ArchivedFilter::Exclude)), HashSet::from([live]));
    assert_eq!(
        list(Some(ArchivedFilter::Include)),
        HashSet::from([live, gone])
    );
    assert_eq!(list(Some(ArchivedFilter::Only)), HashSet::from([gone]));
    store.set_archived(gone, false).unwrap();
    assert_eq!(list(None), HashSet::from([live, gone]));
}

#[test]
fn a_text_query_finds_titles_and_messages_archived_included() {
    let db = TempDb::new();
    let store = db.open();
    let by_title = store
        .create_session(Some("Walrus plans".into()), String::new())
        .unwrap()
        .id;
    let by_message = store.create_session(None, String::new()).unwrap().id;
    store
        .append(by_message, &user("what do walruses eat? a walrus question"))
        .unwrap();
    let by_answer = store.create_session(None, String::new()).unwrap().id;
    store
        .append(by_answer, &user("tell me about seals"))
        .unwrap();
    store
        .append(by_answer, &answer(2, 1, "The walrus is not a seal"))
        .unwrap();
    let other = store
        .create_session(Some("penguins".into()), String::new())
        .unwrap()
        .id;
    store.append(other, &user("penguin facts")).unwrap();
    store.set_archived(by_answer, true).unwrap();

    let found = |query: &str, limit| {
        ids(&page_through(
            &store,
            ListQuery {
                limit,
                query: Some(query.into()),
                ..ListQuery::default()
            },
        ))
    };
    for limit in [1, 2, 10] {
        let got = found("walrus", limit);
        assert_eq!(
            got.len(),
            3,
            "each matching session once, page size {limit}"
        );
        assert_eq!(
            got.iter().copied().collect::<HashSet<_>>(),
            HashSet::from([by_title, by_message, by_answer])
        );
    }
    assert_eq!(found("WALRUS seal", 10), vec![by_answer]);
    assert!(found("narwhal", 10).is_empty());
    assert!(
        found("   ", 10).is_empty(),
        "blanks match nothing, not everything"
    );
    // An explicit filter still applies to a query.
    let only_live = store
        .list_sessions(&ListQuery {
            limit: 10,
            query: Some("walrus".into()),
            archived: Some(ArchivedFilter::Exclude),
            ..ListQuery::default()
        })
        .unwrap();
    assert_eq!(only_live.sessions.len(), 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Any set of sessions (many sharing an updated_at), any page size, any filter: paging
    /// returns exactly the matching sessions, each once, in (updated_at, id) DESC order.
    #[test]
    fn paging_returns_every_session_once_in_order(
        sessions in proptest::collection::vec((0i64..4, any::<bool>()), 0..30),
        limit in 1u32..8,
        filter in prop_oneof![
            Just(ArchivedFilter::Exclude),
            Just(ArchivedFilter::Include),
            Just(ArchivedFilter::Only),
        ],
    ) {
        let db = TempDb::new();
        let clock = Clock::manual(start());
        let store = db.open_with(clock.clone());
        let mut rows = Vec::new();
        for (second, archived) in &sessions {
            clock.set(start() + SignedDuration::from_secs(*second));
            let id = store.create_session(None, String::new()).unwrap().id;
            rows.push(store.set_archived(id, *archived).unwrap());
        }
        let (lo, hi) = filter.archived_range();
        let wanted: Vec<SessionRow> = rows
            .into_iter()
            .filter(|r| r.archived >= lo && r.archived <= hi)
            .collect();
        let got = page_through(
            &store,
            ListQuery { limit, archived: Some(filter), ..ListQuery::default() },
        );
        prop_assert_eq!(ids(&got), expected_order(wanted));
    }
}
