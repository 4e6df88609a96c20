//! Message search: plain words by default, FTS5 syntax on request; ranked hits with
//! plain-text snippets and highlight ranges; hostile queries never panic or error in plain
//! mode.

use std::collections::HashSet;

use brain::session::events::{TitledBy, kind};
use brain::session::store::{RANK_WINDOW, SearchHit, SearchOrder, SearchQuery, Syntax};
use brain::session::{Store, StoreError};
use proptest::prelude::*;

use crate::support::*;

fn plain(text: &str) -> SearchQuery {
    SearchQuery {
        text: text.into(),
        syntax: Syntax::Plain,
        limit: 20,
        offset: 0,
        order: SearchOrder::Relevance,
        stem: false,
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

fn ordered(text: &str, order: SearchOrder, limit: u32, offset: u32) -> SearchQuery {
    SearchQuery {
        limit,
        offset,
        order,
        ..plain(text)
    }
}

/// Best first ranks the newest `RANK_WINDOW` matches and no older ones: an old event that
/// would outrank them all is ranked while it is inside the window and not once it falls
/// out of it; newest first still reaches it.
#[test]
fn best_first_ranks_only_the_newest_window_of_matches() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    let dense = store.append(id, &user("needle needle needle")).unwrap().seq;
    store
        .write(|w| {
            for n in 1..RANK_WINDOW {
                w.append(
                    id,
                    &user(&format!(
                        "a long message {n} about hay, and one needle in it"
                    )),
                )?;
            }
            Ok(())
        })
        .unwrap();
    let top = |store: &Store| store.search(&ordered("needle", SearchOrder::Relevance, 1, 0));
    // Exactly RANK_WINDOW matches: the oldest is inside the window, and best.
    assert_eq!(top(&store).unwrap()[0].seq, dense);
    let last = store
        .append(id, &user("one more needle, the newest"))
        .unwrap();
    assert_ne!(top(&store).unwrap()[0].seq, dense);
    let deep = store
        .search(&ordered(
            "needle",
            SearchOrder::Relevance,
            10,
            RANK_WINDOW - 1,
        ))
        .unwrap();
    assert_eq!(deep.len(), 1, "the window holds RANK_WINDOW matches");
    let recent = |offset| store.search(&ordered("needle", SearchOrder::Recent, 1, offset));
    assert_eq!(recent(0).unwrap()[0].seq, last.seq);
    assert_eq!(recent(RANK_WINDOW).unwrap()[0].seq, dense);
}

/// Newest first pages exactly through many identical hits spread over sessions (every
/// bm25 score ties): each hit once, in reverse append order, whatever the page size.
#[test]
fn newest_first_pages_exactly_through_identical_hits() {
    let db = TempDb::new();
    let store = db.open();
    let sessions: Vec<_> = (0..3)
        .map(|_| store.create_session(None, String::new()).unwrap().id)
        .collect();
    let mut appended = Vec::new();
    store
        .write(|w| {
            for n in 0..250 {
                let id = sessions[n % 3];
                appended.push((id, w.append(id, &user("the very same words"))?.seq));
            }
            Ok(())
        })
        .unwrap();
    appended.reverse();
    for page in [1, 7, 100] {
        let mut seen = Vec::new();
        for offset in (0..).step_by(page as usize) {
            let hits = store
                .search(&ordered("same words", SearchOrder::Recent, page, offset))
                .unwrap();
            if hits.is_empty() {
                break;
            }
            seen.extend(hits.iter().map(|h| (h.session_id, h.seq)));
        }
        assert_eq!(seen, appended, "page size {page}");
    }
    // Best first with all scores tied is as exact: each hit once.
    let mut best = Vec::new();
    for offset in (0..).step_by(7) {
        let hits = store
            .search(&ordered("same words", SearchOrder::Relevance, 7, offset))
            .unwrap();
        if hits.is_empty() {
            break;
        }
        best.extend(hits.iter().map(|h| (h.session_id, h.seq)));
    }
    assert_eq!(best.len(), appended.len());
    let distinct: HashSet<_> = best.iter().collect();
    assert_eq!(distinct.len(), appended.len());
}

/// Newest first keeps the rest of the contract: titles and archived sessions found,
/// snippets with highlights, FTS syntax and its errors.
#[test]
fn newest_first_keeps_snippets_highlights_and_fts_syntax() {
    let (_db, store) = corpus();
    let recent = store
        .search(&ordered("otter", SearchOrder::Recent, 20, 0))
        .unwrap();
    let mut best = store.search(&plain("otter")).unwrap();
    let key = |h: &SearchHit| (h.session_id, h.seq);
    best.sort_by_key(|h| std::cmp::Reverse(h.created_at.clone()));
    let (mut a, mut b): (Vec<_>, Vec<_>) = (
        recent.iter().map(key).collect(),
        best.iter().map(key).collect(),
    );
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same hits, archived session included");
    assert!(
        recent
            .windows(2)
            .all(|w| w[0].created_at >= w[1].created_at),
        "{recent:#?}"
    );
    for hit in &recent {
        assert!(
            highlighted(hit)
                .iter()
                .all(|m| m.eq_ignore_ascii_case("otter")),
            "{hit:?}"
        );
        assert!(!highlighted(hit).is_empty(), "{hit:?}");
    }
    let either = SearchQuery {
        order: SearchOrder::Recent,
        ..fts("rivers OR pasta")
    };
    assert_eq!(store.search(&either).unwrap().len(), 3);
    let broken = SearchQuery {
        order: SearchOrder::Recent,
        ..fts("\"unclosed")
    };
    assert!(matches!(
        store.search(&broken),
        Err(StoreError::BadQuery(_))
    ));
}

/// A small labelled relevance set: a corpus larger than the rank window (Zipf-like filler,
/// two words in 40% of events so they match more than `RANK_WINDOW`), queries with a known
/// best hit planted old or new, each label checked against bm25 over every match. The
/// window keeps the best hit on top whenever a query matches at most `RANK_WINDOW` events
/// (every multi-word query here, and a word in 5% of events) or the best hit is recent;
/// it loses it when a single word matches more than the window and the best hit is
/// older than the window — 1 of the 7 here, and a second word or newest first finds it.
#[test]
fn the_rank_window_keeps_the_best_hit_on_top_for_typical_queries() {
    const EVENTS: usize = 6_000;
    let db = TempDb::new();
    let store = db.open();
    let sessions: Vec<_> = (0..20)
        .map(|_| store.create_session(None, String::new()).unwrap().id)
        .collect();
    // (query, the best hit's text, where it is planted: its index among the events)
    let labelled: [(&str, &str, usize); 7] = [
        (
            "sourdough starter",
            "sourdough starter: feed the sourdough starter",
            100,
        ),
        (
            "borrow checker lifetime",
            "the borrow checker and a lifetime: borrow checker lifetime rules",
            3_000,
        ),
        (
            "rust lifetime",
            "rust lifetime, rust lifetime, explained",
            50,
        ),
        ("rust", "rust rust rust", 5_800),
        ("bread", "bread bread bread", 10),
        (
            "kettle descaling",
            "kettle descaling with vinegar: kettle descaling",
            2_500,
        ),
        ("kettle", "kettle kettle kettle", 20),
    ];
    let mut rng: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut planted = std::collections::HashMap::new();
    store
        .write(|w| {
            for n in 0..EVENTS {
                let id = sessions[n % sessions.len()];
                let text = match labelled.iter().find(|l| l.2 == n) {
                    Some(l) => l.1.to_owned(),
                    None => {
                        // Zipf-like filler: a word's rank is a product of two uniform
                        // draws, so low ranks are common and high ones rare.
                        let mut words: Vec<String> = (0..20 + next(20))
                            .map(|_| format!("w{}", next(40) * next(40)))
                            .collect();
                        for (word, per_mille) in [
                            ("rust", 400),
                            ("kettle", 400),
                            ("bread", 50),
                            ("lifetime", 20),
                            ("sourdough", 10),
                            ("starter", 10),
                            ("borrow", 10),
                            ("checker", 10),
                            ("descaling", 10),
                        ] {
                            if next(1000) < per_mille {
                                words.push(word.to_owned());
                            }
                        }
                        words.join(" ")
                    }
                };
                let seq = w.append(id, &user(&text))?.seq;
                if let Some(l) = labelled.iter().find(|l| l.2 == n) {
                    planted.insert(l.0, (id, seq));
                }
            }
            Ok(())
        })
        .unwrap();
    let raw = db.raw();
    let mut kept = Vec::new();
    for (query, _, _) in labelled {
        let expr = brain::session::search::plain_to_fts(query).unwrap();
        // The label is what bm25 over every match puts first.
        let (sid, seq): (String, u64) = raw
            .query_row(
                "SELECT s.id, e.seq FROM session_search
                 JOIN session_events e ON e.id = session_search.rowid
                 JOIN sessions s ON s.n = e.session_n
                 WHERE session_search MATCH ?1 ORDER BY rank LIMIT 1",
                [&expr],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let best = planted[query];
        assert_eq!(
            (sid, seq),
            (best.0.to_string(), best.1),
            "label of {query:?}"
        );
        let matches: u32 = raw
            .query_row(
                "SELECT count(*) FROM session_search WHERE session_search MATCH ?1",
                [&expr],
                |r| r.get(0),
            )
            .unwrap();
        let top = store.search(&plain(query)).unwrap();
        if (top[0].session_id, top[0].seq) == best {
            kept.push(query);
        } else {
            // Lost only past the window, and reachable newest first.
            assert!(matches > RANK_WINDOW, "{query:?}: {matches} matches");
            let last = store
                .search(&ordered(query, SearchOrder::Recent, 100, matches - 100))
                .unwrap();
            assert!(
                last.iter().any(|h| (h.session_id, h.seq) == best),
                "{query:?}"
            );
        }
    }
    assert_eq!(
        kept,
        [
            "sourdough starter",
            "borrow checker lifetime",
            "rust lifetime",
            "rust",
            "bread",
            "kettle descaling"
        ],
        "precision at 1 with the window: {} of {}",
        kept.len(),
        labelled.len()
    );
}

/// FTS syntax errors are the query's fault in both orders, even with nothing to search
/// (a statement the planner may start from an empty table must still parse the query).
#[test]
fn bad_fts_is_bad_query_on_an_empty_store_in_both_orders() {
    let db = TempDb::new();
    let store = db.open();
    for order in [SearchOrder::Relevance, SearchOrder::Recent] {
        for text in ["NEAR(", "AND", "\"unclosed"] {
            let q = SearchQuery { order, ..fts(text) };
            let got = store.search(&q);
            assert!(
                matches!(got, Err(StoreError::BadQuery(_))),
                "{order:?} {text:?}: {got:?}"
            );
        }
    }
}
