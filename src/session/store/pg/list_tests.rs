//! Tests of the PostgreSQL list and search (`list.rs`): the contract of SQLite's search
//! tests, and SQLite's answers on the same data.

use std::collections::HashSet;

use super::*;
use crate::session::events::{Payload, SessionArchived, kind};
use crate::session::store::pg::fixture::{Twin, twin};
use crate::session::store::pg::snippet::{self, ELLIPSIS};
use crate::session::testlog::Log;

fn archived(log: &mut Log) {
    log.push(Payload::SessionArchived(SessionArchived { archived: true }));
}

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

fn ordered(text: &str, order: SearchOrder, limit: u32, offset: u32) -> SearchQuery {
    SearchQuery {
        limit,
        offset,
        order,
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

fn keys(hits: &[SearchHit]) -> Vec<(SessionId, u64)> {
    hits.iter().map(|h| (h.session_id, h.seq)).collect()
}

fn key_set(hits: &[SearchHit]) -> HashSet<(SessionId, u64)> {
    keys(hits).into_iter().collect()
}

/// SQLite's search corpus (tests/it/search.rs): a titled session about otters, and an
/// archived one whose summary mentions an otter-shaped pasta.
fn corpus(t: &mut Twin) -> (SessionId, SessionId) {
    let mut a = Log::new("");
    a.title("Otter trip");
    let u = a.user("Where can I see an otter? My e-mail is x@y.z");
    a.answer(u, 1, "Otters live by rivers. Otter otter otter.");
    let mut b = Log::new("");
    b.title("Cooking");
    b.user("Don't overcook the pasta; I'm writing C++ tonight");
    b.compaction("We talked about an otter-shaped pasta", 2);
    archived(&mut b);
    (t.import(&a.events), t.import(&b.events))
}

fn page_all(t: &mut Twin, q: &ListQuery) -> Vec<SessionId> {
    let mut q = q.clone();
    let mut seen = Vec::new();
    loop {
        let pg = list_sessions(&mut t.pg, &q).unwrap();
        assert_eq!(pg, t.sqlite.list_sessions(&q).unwrap(), "{q:?}");
        seen.extend(pg.sessions.iter().map(|s| s.id));
        match pg.next {
            Some(c) => q.before = Some(c),
            None => return seen,
        }
    }
}

/// Sessions sharing an `updated_at` are neither repeated nor skipped across pages, for
/// every archived filter and page size; every page equals SQLite's.
#[test]
fn keyset_pages_with_ties_equal_sqlites() {
    let Some(mut t) = twin("keyset_pages_with_ties_equal_sqlites") else {
        return;
    };
    let mut ids = Vec::new();
    for n in 0..9 {
        let mut log = Log::new("s");
        log.user("hello");
        if n % 3 == 0 {
            archived(&mut log);
        }
        let id = t.import(&log.events);
        // Three sessions per instant: ties broken by id.
        t.set_updated_at(id, &format!("2026-11-30T10:00:0{}.000001Z", n / 3));
        ids.push((id, n % 3 == 0));
    }
    let mut expected: Vec<(String, SessionId, bool)> = ids
        .iter()
        .map(|&(id, a)| (t.sqlite.session(id).unwrap().updated_at, id, a))
        .collect();
    expected.sort();
    expected.reverse();
    for (filter, admits) in [
        (None, [true, false]),
        (Some(ArchivedFilter::Exclude), [true, false]),
        (Some(ArchivedFilter::Include), [true, true]),
        (Some(ArchivedFilter::Only), [false, true]),
    ] {
        let want: Vec<SessionId> = expected
            .iter()
            .filter(|(_, _, a)| admits[usize::from(*a)])
            .map(|(_, id, _)| *id)
            .collect();
        for limit in [1, 2, 3, 50] {
            let q = ListQuery {
                before: None,
                limit,
                archived: filter,
                query: None,
            };
            assert_eq!(page_all(&mut t, &q), want, "{filter:?}, limit {limit}");
        }
    }
}

/// A text query lists the sessions with a matching title or message, archived ones
/// included unless filtered; blanks list nothing; each page equals SQLite's.
#[test]
fn a_list_query_finds_titles_and_text() {
    let Some(mut t) = twin("a_list_query_finds_titles_and_text") else {
        return;
    };
    let (a, b) = corpus(&mut t);
    let query = |text: &str, archived| ListQuery {
        before: None,
        limit: 1,
        archived,
        query: Some(text.into()),
    };
    let found = |t: &mut Twin, text: &str, archived| -> HashSet<SessionId> {
        page_all(t, &query(text, archived)).into_iter().collect()
    };
    assert_eq!(found(&mut t, "otter", None), HashSet::from([a, b]));
    assert_eq!(found(&mut t, "cooking", None), HashSet::from([b]));
    assert_eq!(found(&mut t, "rivers otter", None), HashSet::from([a]));
    assert_eq!(
        found(&mut t, "otter", Some(ArchivedFilter::Exclude)),
        HashSet::from([a])
    );
    assert_eq!(
        found(&mut t, "otter", Some(ArchivedFilter::Only)),
        HashSet::from([b])
    );
    assert!(found(&mut t, "narwhal", None).is_empty());
    assert!(found(&mut t, " \t ", None).is_empty());
    assert!(found(&mut t, "'; DROP TABLE sessions; --", None).is_empty());
}

/// The contract of SQLite's search tests, on PostgreSQL, and the same hits as SQLite.
#[test]
fn plain_search_finds_and_highlights_what_sqlite_finds() {
    let Some(mut t) = twin("plain_search_finds_and_highlights_what_sqlite_finds") else {
        return;
    };
    let (_, b) = corpus(&mut t);
    let hits = search(&mut t.pg, &plain("otter")).unwrap();
    let kinds: HashSet<&str> = hits.iter().map(|h| h.kind.as_str()).collect();
    assert_eq!(
        kinds,
        HashSet::from([
            kind::SESSION_TITLED,
            kind::USER_MESSAGE,
            kind::ASSISTANT_TURN,
            kind::COMPACTION_APPLIED
        ])
    );
    let sqlite = t.sqlite.search(&plain("otter")).unwrap();
    assert_eq!(key_set(&hits), key_set(&sqlite));
    let summary = hits
        .iter()
        .find(|h| h.kind == kind::COMPACTION_APPLIED)
        .unwrap();
    assert_eq!(
        (summary.session_id, summary.title.as_deref()),
        (b, Some("Cooking"))
    );
    // Best first: the answer repeating the word before the long question, the short
    // title before the long summary.
    let pos = |k: &str| hits.iter().position(|h| h.kind == k).unwrap();
    assert!(
        pos(kind::ASSISTANT_TURN) < pos(kind::USER_MESSAGE),
        "{hits:#?}"
    );
    assert!(
        pos(kind::SESSION_TITLED) < pos(kind::COMPACTION_APPLIED),
        "{hits:#?}"
    );
    for hit in &hits {
        let marked = highlighted(hit);
        assert!(!marked.is_empty(), "{hit:?}");
        assert!(
            marked.iter().all(|m| m.eq_ignore_ascii_case("otter")),
            "{hit:?}"
        );
        assert!(!hit.snippet.contains('\u{E000}') && !hit.snippet.contains('\u{E002}'));
    }
    // Whole short texts, punctuation included, as SQLite's snippets.
    let snippets = |hits: &[SearchHit]| -> HashSet<String> {
        hits.iter().map(|h| h.snippet.clone()).collect()
    };
    assert_eq!(snippets(&hits), snippets(&sqlite));
    let both = search(&mut t.pg, &plain("rivers otter")).unwrap();
    assert_eq!(
        keys(&both),
        keys(&t.sqlite.search(&plain("rivers otter")).unwrap())
    );
    let mut marked = highlighted(&both[0]);
    marked.sort();
    marked.dedup();
    assert_eq!(marked, vec!["Otter", "otter", "rivers"]);
    // Words with punctuation are words, and every word must match.
    for q in [
        "e-mail",
        "don't",
        "C++ tonight",
        "\"pasta\"",
        "otter narwhal",
        "*",
    ] {
        let pg = search(&mut t.pg, &plain(q)).unwrap();
        // As `Store::search` shows them (the SQLite twin is a `Store`).
        let pg = crate::session::search_display::present(pg, &plain(q), &Default::default());
        let sqlite = t.sqlite.search(&plain(q)).unwrap();
        assert_eq!(key_set(&pg), key_set(&sqlite), "{q}");
        for (p, s) in pg.iter().zip(&sqlite) {
            assert_eq!(highlighted(p), highlighted(s), "{q}");
        }
    }
    assert!(
        search(&mut t.pg, &plain("otter narwhal"))
            .unwrap()
            .is_empty()
    );
    // Offsets page through the same hits.
    let mut paged = Vec::new();
    for offset in (0..10).step_by(2) {
        let q = SearchQuery {
            limit: 2,
            offset,
            ..plain("otter")
        };
        paged.extend(search(&mut t.pg, &q).unwrap());
    }
    assert_eq!(paged, hits);
}

/// Highlight ranges count characters; a snippet cut from a longer text says so with
/// ellipses at the cut ends, as SQLite's do. Here the stores' tokenizers differ:
/// SQLite folds diacritics, PostgreSQL's `simple` does not (module docs).
#[test]
fn snippets_count_characters_and_mark_cuts() {
    let Some(mut t) = twin("snippets_count_characters_and_mark_cuts") else {
        return;
    };
    let mut log = Log::new("");
    log.user("ünïcödé 🦓🦓 zèbre rayé");
    let words: Vec<String> = (0..60).map(|n| format!("w{n}")).collect();
    log.user(&format!(
        "{} narwhal {}",
        words[..30].join(" "),
        words[30..].join(" ")
    ));
    log.user("narwhal at the start");
    t.import(&log.events);
    let hits = search(&mut t.pg, &plain("zèbre")).unwrap();
    assert_eq!(highlighted(&hits[0]), vec!["zèbre"]);
    assert_eq!(hits[0].snippet, "ünïcödé 🦓🦓 zèbre rayé");
    assert_eq!(
        key_set(&hits),
        key_set(&t.sqlite.search(&plain("zèbre")).unwrap())
    );
    assert!(search(&mut t.pg, &plain("zebre")).unwrap().is_empty());
    assert_eq!(t.sqlite.search(&plain("zebre")).unwrap().len(), 1);

    let hits = search(&mut t.pg, &ordered("narwhal", SearchOrder::Recent, 10, 0)).unwrap();
    let sqlite = t
        .sqlite
        .search(&ordered("narwhal", SearchOrder::Recent, 10, 0))
        .unwrap();
    assert_eq!(keys(&hits), keys(&sqlite));
    let (start, middle) = (&hits[0], &hits[1]);
    assert_eq!(start.snippet, "narwhal at the start");
    assert!(middle.snippet.starts_with(ELLIPSIS) && middle.snippet.ends_with(ELLIPSIS));
    assert!(sqlite[1].snippet.starts_with(ELLIPSIS) && sqlite[1].snippet.ends_with(ELLIPSIS));
    assert_eq!(highlighted(middle), vec!["narwhal"]);
    assert!(middle.snippet.chars().count() < 200, "{middle:?}");
}

/// A checkpoint of an attempt that completed is no hit (its answer is); an interrupted
/// attempt's checkpoints are; a hit in a branch an edit abandoned is marked.
#[test]
fn completed_checkpoints_are_left_out_and_abandoned_hits_marked() {
    let Some(mut t) = twin("completed_checkpoints_are_left_out_and_abandoned_hits_marked") else {
        return;
    };
    let mut log = Log::new("");
    let t1 = log.user("tell me about zanzibar");
    let done = log.checkpoint(t1, 1, "zanzibar is ");
    let answer = log.answer(t1, 1, "zanzibar is an island");
    let t2 = log.user("and pemba?");
    let cut = log.checkpoint(t2, 1, "pemba lies north of zanzibar");
    log.ended(t2, 1, " too", "cut");
    let edited = log.edit(t1, "tell me about mafia island");
    let id = t.import(&log.events);
    let hits = search(&mut t.pg, &plain("zanzibar")).unwrap();
    let seqs: HashSet<u64> = hits.iter().map(|h| h.seq).collect();
    assert!(!seqs.contains(&done));
    assert!(seqs.contains(&answer) && seqs.contains(&cut) && seqs.contains(&t1));
    let sqlite = t.sqlite.search(&plain("zanzibar")).unwrap();
    assert_eq!(key_set(&hits), key_set(&sqlite));
    for h in &hits {
        let twin = sqlite.iter().find(|s| s.seq == h.seq).unwrap();
        assert_eq!(h.abandoned, twin.abandoned, "{h:?}");
        assert_eq!(h.abandoned, h.seq > 1 && h.seq < edited - 1, "{h:?}");
        assert_eq!(h.session_id, id);
    }
    assert!(hits.iter().any(|h| h.abandoned));
    let island = search(&mut t.pg, &plain("island")).unwrap();
    assert!(island.iter().any(|h| h.seq == edited && !h.abandoned));
}

/// Newest first pages exactly through identical hits over sessions, in reverse append
/// order, as SQLite does; best first with every score tied orders by session and seq
/// on both stores, so the two agree hit for hit.
#[test]
fn identical_hits_page_exactly_in_both_orders() {
    let Some(mut t) = twin("identical_hits_page_exactly_in_both_orders") else {
        return;
    };
    for _ in 0..3 {
        let mut log = Log::new("");
        for _ in 0..20 {
            log.user("the very same words");
        }
        t.import(&log.events);
    }
    for order in [SearchOrder::Recent, SearchOrder::Relevance] {
        let all = search(&mut t.pg, &ordered("same words", order, 100, 0)).unwrap();
        assert_eq!(all.len(), 60);
        let sqlite = t
            .sqlite
            .search(&ordered("same words", order, 100, 0))
            .unwrap();
        assert_eq!(keys(&all), keys(&sqlite), "{order:?}");
        for page in [1, 7] {
            let mut seen = Vec::new();
            for offset in (0..).step_by(page as usize) {
                let hits = search(&mut t.pg, &ordered("same words", order, page, offset)).unwrap();
                if hits.is_empty() {
                    break;
                }
                seen.extend(keys(&hits));
            }
            assert_eq!(seen, keys(&all), "{order:?}, page {page}");
        }
    }
}

/// Best first ranks the newest `RANK_WINDOW` matches only, as on SQLite.
#[test]
fn best_first_ranks_only_the_newest_window() {
    let Some(mut t) = twin("best_first_ranks_only_the_newest_window") else {
        return;
    };
    let mut log = Log::new("");
    let dense = log.user("needle needle needle");
    for n in 1..RANK_WINDOW {
        log.user(&format!(
            "a long message {n} about hay, and one needle in it"
        ));
    }
    let last = log.user("one more needle, the newest");
    t.import(&log.events);
    let top = search(&mut t.pg, &ordered("needle", SearchOrder::Relevance, 1, 0)).unwrap();
    assert_ne!(top[0].seq, dense, "the dense one is out of the window");
    let deep = ordered("needle", SearchOrder::Relevance, 10, RANK_WINDOW - 1);
    assert_eq!(search(&mut t.pg, &deep).unwrap().len(), 1);
    let recent = |t: &mut Twin, offset| {
        search(
            &mut t.pg,
            &ordered("needle", SearchOrder::Recent, 1, offset),
        )
        .unwrap()[0]
            .seq
    };
    assert_eq!(recent(&mut t, 0), last);
    assert_eq!(recent(&mut t, RANK_WINDOW), dense);
}

fn hostile_queries() -> Vec<String> {
    let mut q: Vec<String> = [
        "\"unbalanced",
        "unbalanced\"",
        "AND OR",
        "OR NOT",
        "NEAR(",
        "*",
        "-",
        "otter*",
        "^otter",
        "(",
        ")",
        "search_text:otter",
        "\"\"",
        "",
        "   ",
        "\u{0}\u{1}\u{7}\u{1b}[31m",
        "otter\u{0}",
        "🦓🦓 🐙",
        "'; DROP TABLE sessions; --",
        "a + b - c",
        "\\",
        "'",
        "''",
        "otter & !",
        "a <-> b",
        "x:*",
        "-otter",
        "or",
        "\"otter",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    q.push("otter ".repeat(2_000));
    q.push("x".repeat(10_240));
    q
}

/// Plain queries never fail; FTS queries are results or `BadQuery`, never another
/// error; websearch syntax works; the few things PostgreSQL rejects are `BadQuery`.
#[test]
fn hostile_queries_are_results_or_bad_query() {
    let Some(mut t) = twin("hostile_queries_are_results_or_bad_query") else {
        return;
    };
    corpus(&mut t);
    for q in hostile_queries() {
        for order in [SearchOrder::Relevance, SearchOrder::Recent] {
            let p = SearchQuery { order, ..plain(&q) };
            assert!(search(&mut t.pg, &p).is_ok(), "{q:?}");
            let f = SearchQuery { order, ..fts(&q) };
            match search(&mut t.pg, &f) {
                Ok(_) => {}
                Err(StoreError::BadQuery(m)) => assert!(!m.is_empty()),
                Err(other) => panic!("{q:?}: {other:?}"),
            }
        }
    }
    assert!(
        !search(&mut t.pg, &plain(&"otter ".repeat(2_000)))
            .unwrap()
            .is_empty()
    );
    // A NUL separates words as any control character does (PostgreSQL refused it).
    assert!(!search(&mut t.pg, &fts("otter\u{0}")).unwrap().is_empty());
    for bad in ["", "  ", "-otter"] {
        assert!(
            matches!(search(&mut t.pg, &fts(bad)), Err(StoreError::BadQuery(_))),
            "{bad:?}"
        );
    }
    let pg = search(&mut t.pg, &fts("otter -rivers")).unwrap();
    let sqlite = t.sqlite.search(&fts("otter NOT rivers")).unwrap();
    assert_eq!(pg.len(), 3);
    assert_eq!(key_set(&pg), key_set(&sqlite));
    let pg = search(&mut t.pg, &fts("rivers or pasta")).unwrap();
    assert_eq!(
        key_set(&pg),
        key_set(&t.sqlite.search(&fts("rivers OR pasta")).unwrap())
    );
    let phrase = search(&mut t.pg, &fts("\"otter otter\"")).unwrap();
    assert_eq!(phrase.len(), 1);
}

/// Any text is a valid plain query: its words always make a tsquery.
#[test]
fn any_text_is_a_valid_plain_query() {
    let Some(t) = twin("any_text_is_a_valid_plain_query") else {
        return;
    };
    let t = std::cell::RefCell::new(t);
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(&proptest::prelude::any::<String>(), |q| {
            let r = parse(&mut t.borrow_mut().pg, Syntax::Plain, &q, false);
            proptest::prop_assert!(r.is_ok(), "{q:?}: {:?}", r.err());
            Ok(())
        })
        .unwrap();
}

/// Each word is one term or phrase of its tokens (split as unicode61 splits), nothing is
/// syntax, and a word repeated (in any punctuation) is one term; an FTS query past the
/// size limit is `BadQuery`, a plain one keeps its first words.
#[test]
fn plain_words_become_distinct_terms() {
    let Some(mut t) = twin("plain_words_become_distinct_terms") else {
        return;
    };
    assert_eq!(
        plain_words(" e-mail\tdon't\u{0}C++ "),
        ["e-mail", "don't", "C++"]
    );
    assert!(plain_words(" \n\t\u{7}").is_empty());
    let parsed = |t: &mut Twin, syntax, q: &str| parse(&mut t.pg, syntax, q, false).unwrap();
    let p = parsed(
        &mut t,
        Syntax::Plain,
        "otter e-mail don't otter! (otter OR -x *",
    );
    assert_eq!(
        p.tsquery,
        "'don' <-> 't' & 'e' <-> 'mail' & 'or' & 'otter' & 'x'"
    );
    assert!(p.indexable);
    let many = "otter ".repeat(2_000);
    assert_eq!(parsed(&mut t, Syntax::Plain, &many).nodes, 1);
    assert_eq!(parsed(&mut t, Syntax::Plain, "* !").tsquery, "");
    assert!(!parsed(&mut t, Syntax::Fts, "-otter").indexable);
    assert!(matches!(
        search(&mut t.pg, &fts(&many)),
        Err(StoreError::BadQuery(_))
    ));
    // One word of many parts is one long phrase: its first parts are searched for.
    let parts = vec!["x"; 300].join("-");
    assert_eq!(
        usize::try_from(parsed(&mut t, Syntax::Plain, &parts).nodes).unwrap(),
        MAX_QUERY_NODES
    );
    assert!(search(&mut t.pg, &plain(&parts)).is_ok());
    // Review #7: a pasted 200-word query is answered (its first 128 distinct words), not
    // refused as SQLite answers it.
    let pasted: Vec<String> = (0..200).map(|i| format!("word{i}")).collect();
    let p = parsed(&mut t, Syntax::Plain, &pasted.join(" "));
    assert_eq!(usize::try_from(p.nodes).unwrap(), MAX_QUERY_NODES);
    assert!(search(&mut t.pg, &plain(&pasted.join(" "))).is_ok());
}

/// Each statement has an index path in the order it reads (the tables are tiny, so
/// sequential scans are switched off to see whether one exists): the lists read a
/// keyset index with no sort; searches find matches through the GIN index.
#[test]
fn every_statement_has_an_index_path() {
    let Some(mut t) = twin("every_statement_has_an_index_path") else {
        return;
    };
    t.pg.batch_execute("SET enable_seqscan = off").unwrap();
    let plan = |t: &mut Twin, sql: &str| -> String {
        t.pg.query(&format!("EXPLAIN {sql}"), &[])
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let bind = |sql: &str, args: &[&str]| {
        let mut sql = sql.to_owned();
        for (i, a) in args.iter().enumerate().rev() {
            sql = sql.replace(&format!("${}", i + 1), a);
        }
        sql
    };
    let cursor = [
        "'infinity'",
        "'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid",
        "10",
    ];
    for (sql, extra) in [(LIST_ALL, vec![]), (LIST_FILTERED, vec!["false"])] {
        let p = plan(&mut t, &bind(sql, &[&cursor[..], &extra[..]].concat()));
        assert!(
            p.contains("Index Scan Backward") && !p.contains("Sort"),
            "{p}"
        );
    }
    let q = "'''otter'''";
    for (sql, extra) in [
        (LIST_ALL_MATCHING, vec![q]),
        (LIST_FILTERED_MATCHING, vec!["true", q]),
    ] {
        let p = plan(&mut t, &bind(sql, &[&cursor[..], &extra[..]].concat()));
        assert!(p.contains("session_search"), "{p}");
    }
    let recent = ["'otter'::tsquery", "20", "0", "'{%c++%}'"];
    let best = ["'otter'::tsquery", "20", "0", "2000", "'{}'"];
    for (sql, args, index) in [
        (SEARCH_RECENT, &recent[..], "session_search "),
        (SEARCH_RELEVANCE, &best[..], "session_search "),
        (SEARCH_RECENT_STEM, &recent[..], "session_search_stem"),
        (SEARCH_RELEVANCE_STEM, &best[..], "session_search_stem"),
    ] {
        let p = plan(&mut t, &bind(sql, args));
        assert!(p.contains(&format!("Bitmap Index Scan on {index}")), "{p}");
    }
}

/// V9's separator class (SQL) and [`snippet::is_separator`] (Rust) agree: each character
/// at the edge of every range, and a few inside words, indexes as the Rust side splits it.
/// (Characters that are neither in the class nor letters or digits — symbols outside its
/// blocks, unassigned code points — the parser may split further by the database's
/// locale; that moves a highlight, never a match.)
#[test]
fn the_search_column_splits_words_as_the_snippets_do() {
    let Some(mut t) = twin("the_search_column_splits_words_as_the_snippets_do") else {
        return;
    };
    let mut probes: Vec<char> = "aZ09_-.@/<>:~ éÉßøñ日本語кириллица".chars().collect();
    for (lo, hi) in [
        (0x80u32, 0xBF),
        (0xD7, 0xD7),
        (0xF7, 0xF7),
        (0x2000, 0x206F),
        (0x20A0, 0x20CF),
        (0x2190, 0x245F),
        (0x2500, 0x2BFF),
        (0x3000, 0x3004),
        (0x3008, 0x3020),
        (0xFE10, 0xFE1F),
        (0xFE30, 0xFE6F),
        (0xFF00, 0xFF0F),
        (0xFF1A, 0xFF20),
        (0xFF3B, 0xFF40),
        (0xFF5B, 0xFF65),
        (0xFFF0, 0xFFFD),
        (0x1F000, 0x1FAFF),
    ] {
        for u in [lo - 1, lo, hi, hi + 1] {
            probes.extend(
                char::from_u32(u).filter(|&c| {
                    snippet::is_separator(c) || c.is_alphabetic() || c.is_ascii_digit()
                }),
            );
        }
    }
    // Each probe between two letters: one word or two.
    let text: String = probes.iter().map(|c| format!("x{c}y ")).collect();
    let mut log = Log::new("sys");
    log.push(Payload::UserMessage(crate::session::events::UserMessage {
        text: text.clone(),
    }));
    let id = t.import(&log.events);
    let lexemes: Vec<String> =
        t.pg.query_one(
            "SELECT tsvector_to_array(search_text) FROM session_events
             WHERE session_id = $1 AND kind = 'user_message'",
            &[&id.as_uuid()],
        )
        .unwrap()
        .get(0);
    let mut expected: Vec<String> = snippet::tokens(&text)
        .iter()
        .map(|&(a, b)| text[a..b].to_lowercase())
        .collect();
    expected.sort();
    expected.dedup();
    let mut lexemes = lexemes;
    lexemes.sort();
    assert_eq!(lexemes, expected);
}

/// Review #7: PostgreSQL's own text (`invalid byte sequence for encoding "UTF8": 0x00`)
/// reached the client in a `bad_query`. The client hears a fixed sentence; the detail is
/// logged.
#[test]
fn a_query_postgres_refuses_is_answered_in_plain_words() {
    let Some(mut t) = twin("a_query_postgres_refuses_is_answered_in_plain_words") else {
        return;
    };
    let refused = t.pg.query_one("SELECT 'otter'::int", &[]).unwrap_err();
    assert!(refused.to_string().contains("db error"), "{refused}");
    match as_bad_query(refused) {
        StoreError::BadQuery(m) => {
            assert_eq!(m, BAD_FTS_QUERY);
            assert!(!m.contains("invalid input syntax"), "{m}");
        }
        other => panic!("{other:?}"),
    }
}
