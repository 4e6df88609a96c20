//! Message search: plain words by default, FTS5 syntax on request; ranked hits with
//! plain-text snippets and highlight ranges; hostile queries never panic or error in plain
//! mode.

use std::collections::HashSet;

use brain::session::events::{TitledBy, kind};
use brain::session::store::{SearchHit, SearchQuery, Syntax};
use brain::session::{Store, StoreError};
use proptest::prelude::*;

use crate::support::*;

fn plain(text: &str) -> SearchQuery {
    SearchQuery {
        text: text.into(),
        syntax: Syntax::Plain,
        limit: 20,
        offset: 0,
    }
}

fn fts(text: &str) -> SearchQuery {
    SearchQuery {
        syntax: Syntax::Fts,
        ..plain(text)
    }
}

/// The highlighted parts of a hit's snippet.
fn highlighted(hit: &SearchHit) -> Vec<String> {
    let chars: Vec<char> = hit.snippet.chars().collect();
    hit.highlights
        .iter()
        .map(|[s, e]| chars[*s..*e].iter().collect())
        .collect()
}

fn corpus() -> (TempDb, Store) {
    let db = TempDb::new();
    let store = db.open();
    let a = store
        .create_session(Some("Otter trip".into()), String::new())
        .unwrap()
        .id;
    store
        .append(a, &user("Where can I see an otter? My e-mail is x@y.z"))
        .unwrap();
    store
        .append(
            a,
            &answer(2, 1, "Otters live by rivers. Otter otter otter."),
        )
        .unwrap();
    let b = store
        .create_session(Some("Cooking".into()), String::new())
        .unwrap()
        .id;
    store
        .append(
            b,
            &user("Don't overcook the pasta; I'm writing C++ tonight"),
        )
        .unwrap();
    store
        .append(b, &compaction("We talked about an otter-shaped pasta", 2))
        .unwrap();
    store.set_archived(b, true).unwrap();
    (db, store)
}

#[test]
fn titles_and_message_text_are_found_archived_included() {
    let (_db, store) = corpus();
    let hits = store.search(&plain("otter")).unwrap();
    let kinds: HashSet<&str> = hits.iter().map(|h| h.kind.as_str()).collect();
    assert_eq!(
        kinds,
        HashSet::from([
            kind::SESSION_STARTED,
            kind::USER_MESSAGE,
            kind::ASSISTANT_TURN,
            kind::COMPACTION_APPLIED
        ])
    );
    let archived_hit = hits
        .iter()
        .find(|h| h.kind == kind::COMPACTION_APPLIED)
        .unwrap();
    assert_eq!(archived_hit.title.as_deref(), Some("Cooking"));
    assert_eq!(archived_hit.seq, 3);
}

#[test]
fn hits_are_ranked_best_first() {
    let (_db, store) = corpus();
    let hits = store.search(&plain("otter")).unwrap();
    // The title (two words, one of them the term) and the answer that repeats it outrank
    // the long message that mentions it once.
    let pos = |k: &str| hits.iter().position(|h| h.kind == k).unwrap();
    assert!(
        pos(kind::ASSISTANT_TURN) < pos(kind::USER_MESSAGE),
        "{hits:#?}"
    );
    assert!(
        pos(kind::SESSION_STARTED) < pos(kind::COMPACTION_APPLIED),
        "{hits:#?}"
    );
}

#[test]
fn snippets_are_plain_text_with_correct_highlight_ranges() {
    let (_db, store) = corpus();
    for hit in store.search(&plain("otter")).unwrap() {
        let marked = highlighted(&hit);
        assert!(!marked.is_empty(), "{hit:?}");
        for m in marked {
            assert!(m.eq_ignore_ascii_case("otter"), "{m:?} in {hit:?}");
        }
        assert!(!hit.snippet.contains('\u{E000}') && !hit.snippet.contains('\u{E002}'));
    }
    let hits = store.search(&plain("rivers otter")).unwrap();
    assert_eq!(hits.len(), 1);
    let mut marked = highlighted(&hits[0]);
    marked.sort();
    marked.dedup();
    assert_eq!(marked, vec!["Otter", "otter", "rivers"]);
}

#[test]
fn highlights_count_characters_not_bytes() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    store.append(id, &user("ünïcödé 🦓🦓 zèbre rayé")).unwrap();
    let hits = store.search(&plain("zebre")).unwrap();
    assert_eq!(hits.len(), 1, "diacritics are folded");
    assert_eq!(highlighted(&hits[0]), vec!["zèbre"]);
}

#[test]
fn punctuation_in_words_just_works() {
    let (_db, store) = corpus();
    for (q, expected_kind) in [
        ("e-mail", kind::USER_MESSAGE),
        ("don't", kind::USER_MESSAGE),
        ("C++ tonight", kind::USER_MESSAGE),
        ("\"pasta\"", kind::USER_MESSAGE),
    ] {
        let hits = store.search(&plain(q)).unwrap();
        assert!(
            hits.iter().any(|h| h.kind == expected_kind),
            "{q}: {hits:?}"
        );
    }
    assert!(
        store.search(&plain("otter narwhal")).unwrap().is_empty(),
        "all words must match"
    );
}

#[test]
fn offset_pages_through_hits_without_repeats() {
    let (_db, store) = corpus();
    let all = store.search(&plain("otter")).unwrap();
    let mut paged = Vec::new();
    for offset in (0..10).step_by(2) {
        paged.extend(
            store
                .search(&SearchQuery {
                    limit: 2,
                    offset,
                    ..plain("otter")
                })
                .unwrap(),
        );
    }
    assert_eq!(paged, all);
}

fn hostile_queries() -> Vec<String> {
    let mut q: Vec<String> = [
        "\"unbalanced",
        "unbalanced\"",
        "AND OR",
        "AND",
        "OR NOT",
        "NEAR(",
        "NEAR(a b",
        "*",
        "-",
        "otter*",
        "^otter",
        "(",
        ")",
        "{search_text}: otter",
        "search_text:otter",
        "nosuchcolumn:otter",
        "\"\"",
        "",
        "   ",
        "\u{0}\u{1}\u{7}\u{1b}[31m",
        "otter\u{0}",
        "🦓🦓 🐙",
        "'; DROP TABLE sessions; --",
        "a + b - c",
        "\\",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    q.push("otter ".repeat(2_000)); // 12 KB
    q.push("x".repeat(10_240));
    q
}

#[test]
fn hostile_queries_never_error_in_plain_mode() {
    let (_db, store) = corpus();
    for q in hostile_queries() {
        assert!(store.search(&plain(&q)).is_ok(), "{q:?}");
    }
    assert!(
        !store
            .search(&plain(&"otter ".repeat(2_000)))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn hostile_queries_in_fts_mode_are_bad_query_or_results() {
    let (_db, store) = corpus();
    let mut bad = 0;
    for q in hostile_queries() {
        match store.search(&fts(&q)) {
            Ok(_) => {}
            Err(StoreError::BadQuery(msg)) => {
                assert!(!msg.is_empty());
                bad += 1;
            }
            Err(other) => panic!("{q:?}: {other:?}"),
        }
    }
    assert!(bad >= 5, "most of these are not valid FTS5 ({bad})");
    // Real FTS5 syntax works.
    assert_eq!(store.search(&fts("otter NOT rivers")).unwrap().len(), 3);
    assert!(!store.search(&fts("ott*")).unwrap().is_empty());
    assert!(matches!(
        store.search(&fts("")),
        Err(StoreError::BadQuery(_))
    ));
}

#[test]
fn renames_and_archiving_show_in_list_search_and_events() {
    let db = TempDb::new();
    let store = db.open();
    let id = store
        .create_session(Some("Before".into()), String::new())
        .unwrap()
        .id;
    store.append(id, &user("a note about kayaks")).unwrap();
    store
        .rename(id, "Kayak weekend".into(), TitledBy::User)
        .unwrap();
    store.set_archived(id, true).unwrap();

    let row = store.session(id).unwrap();
    assert_eq!(row.title.as_deref(), Some("Kayak weekend"));
    assert!(row.archived);
    let hits = store.search(&plain("weekend")).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].kind, kind::SESSION_TITLED);
    let hits = store.search(&plain("kayaks")).unwrap();
    assert_eq!(
        hits[0].title.as_deref(),
        Some("Kayak weekend"),
        "hits carry the current title"
    );
    let kinds: Vec<String> = store
        .events(id, 0, None)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        vec![
            kind::SESSION_STARTED,
            kind::USER_MESSAGE,
            kind::SESSION_TITLED,
            kind::SESSION_ARCHIVED
        ]
    );
    // Repeating a rename or an archive writes nothing.
    store
        .rename(id, "Kayak weekend".into(), TitledBy::User)
        .unwrap();
    store.set_archived(id, true).unwrap();
    assert_eq!(store.events(id, 0, None).unwrap().len(), 4);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_text_is_a_valid_plain_query(q in any::<String>()) {
        let (_db, store) = corpus();
        prop_assert!(store.search(&plain(&q)).is_ok());
        match store.search(&fts(&q)) {
            Ok(_) | Err(StoreError::BadQuery(_)) => {}
            Err(other) => prop_assert!(false, "{:?}: {:?}", q, other),
        }
    }
}
