//! Search on either store means the same (SPEC §7): words are split at every character that
//! is not a letter or digit (unicode61's rule; PostgreSQL's parser kept emails, hosts,
//! paths, versions and tags whole), snippets are the hit's own text with the query's
//! words highlighted, and a NUL in a message, title or system prompt is stored and
//! searched around on both.

use brain::session::Event;
use brain::session::store::{SearchHit, SearchOrder, SearchQuery, Syntax};
use brain::session::{SessionId, Store};

use super::{Db, log};
use crate::support::user;

conformance!(
    compound_words_are_found_by_their_parts,
    snippets_are_the_texts_own_characters,
    a_nul_in_a_message_title_or_system_is_stored_and_searched,
    a_history_with_nul_imports_whole,
    newest_first_is_by_time_for_imported_history,
    best_first_ranks_the_newest_by_time,
);

fn search(store: &Store, q: &str) -> Vec<SearchHit> {
    store
        .search(&SearchQuery {
            text: q.into(),
            limit: 20,
            ..SearchQuery::default()
        })
        .unwrap()
}

/// What each highlight covers, lower-cased.
fn highlighted(hit: &SearchHit) -> Vec<String> {
    let chars: Vec<char> = hit.snippet.chars().collect();
    hit.highlights
        .iter()
        .map(|r| chars[r[0]..r[1]].iter().collect::<String>().to_lowercase())
        .collect()
}

const TEXTS: [&str; 7] = [
    "write to alice@example.com today",
    "read https://docs.rust-lang.org/book first",
    "upgrade to v3.14.15 now",
    "make it <b>bold</b> please",
    "it lives in /usr/local/bin/tool",
    "call snake_case_name here",
    "the host db1.internal answered",
];

fn compound_words_are_found_by_their_parts(db: &Db) {
    let store = db.open();
    let id = store.create_session(None, "sys".into()).unwrap().id;
    for t in TEXTS {
        store.append(id, &user(t)).unwrap();
    }
    for (query, seq) in [
        ("example", 2),
        ("alice example", 2),
        ("rust", 3),
        ("lang", 3),
        ("14", 4),
        ("b", 5),
        ("bold", 5),
        ("local", 6),
        ("tool", 6),
        ("case", 7),
        ("internal", 8),
        ("alice@example.com", 2),
        ("docs.rust-lang.org", 3),
    ] {
        let hits = search(&store, query);
        let seqs: Vec<u64> = hits.iter().map(|h| h.seq).collect();
        assert_eq!(seqs, [seq], "{query:?}: {hits:?}");
        let words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        for h in highlighted(&hits[0]) {
            assert!(
                h.split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                    .all(|w| words.iter().any(|q| q == w)),
                "{query:?}: {h:?} in {:?}",
                hits[0]
            );
        }
        assert!(!hits[0].highlights.is_empty(), "{query:?}: {:?}", hits[0]);
    }
}

fn snippets_are_the_texts_own_characters(db: &Db) {
    let store = db.open();
    let id = store.create_session(None, "sys".into()).unwrap().id;
    for t in TEXTS {
        store.append(id, &user(t)).unwrap();
    }
    let long = format!(
        "{} <i>needle</i> {}",
        "hay ".repeat(50),
        "straw ".repeat(50)
    );
    store.append(id, &user(&long)).unwrap();
    let hits = search(&store, "bold");
    assert_eq!(hits[0].snippet, TEXTS[3]);
    assert_eq!(highlighted(&hits[0]), ["bold"]);
    let hits = search(&store, "needle");
    let s = &hits[0].snippet;
    assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
    assert!(long.contains(s.trim_matches('…')), "{s}");
    assert!(s.contains("<i>needle</i>"), "{s}");
    assert_eq!(highlighted(&hits[0]), ["needle"]);
    // FTS syntax too: the tag's word is found and the snippet is the text's own.
    let fts = store
        .search(&SearchQuery {
            text: "bold".into(),
            syntax: Syntax::Fts,
            limit: 5,
            ..SearchQuery::default()
        })
        .unwrap();
    assert_eq!(fts[0].snippet, TEXTS[3]);
}

/// Review #4: a `\u0000` in a message made PostgreSQL's search column fail (500), and a
/// NUL in a title or system prompt could not be stored.
fn a_nul_in_a_message_title_or_system_is_stored_and_searched(db: &Db) {
    let store = db.open();
    let row = store
        .create_session(Some("ti\0tle zeta".into()), "sys\0tem".into())
        .unwrap();
    let message = store.append(row.id, &user("before\0after quokka")).unwrap();
    assert!(message.payload.contains("\\u0000"), "{}", message.payload);
    assert_eq!(log(&store, row.id)[1], message);
    assert_eq!(store.events(row.id, 0, None).unwrap()[1], message);
    // The cache holds the title and system as written, or (PostgreSQL, whose text cannot
    // hold a NUL) with U+FFFD in its place.
    let read = store.session(row.id).unwrap();
    let stored = |s: &str, written: &str| s == written || s == written.replace('\0', "\u{FFFD}");
    assert!(
        stored(read.title.as_deref().unwrap(), "ti\0tle zeta"),
        "{read:?}"
    );
    assert!(stored(&read.system, "sys\0tem"), "{read:?}");
    let hits = search(&store, "quokka");
    assert_eq!(hits.iter().map(|h| h.seq).collect::<Vec<_>>(), [2]);
    let titles = search(&store, "zeta");
    assert_eq!(titles.iter().map(|h| h.seq).collect::<Vec<_>>(), [1]);
    let renamed = store
        .write(|w| {
            w.rename(
                row.id,
                "new\0name".into(),
                brain::session::events::TitledBy::User,
            )
        })
        .unwrap();
    assert!(stored(renamed.title.as_deref().unwrap(), "new\0name"));
}

/// An SQLite history holding NULs moves to this store byte for byte (export, import).
fn a_history_with_nul_imports_whole(db: &Db) {
    let source = Db::sqlite();
    let from = source.open();
    let row = from
        .create_session(Some("t\0itle".into()), "s\0ystem".into())
        .unwrap();
    from.append(row.id, &user("a\0b otter")).unwrap();
    let events = log(&from, row.id);
    let to = db.open();
    let id = SessionId::generate();
    to.write(|w| w.import_session(id, &events)).unwrap();
    let imported = log(&to, id);
    assert_eq!(
        imported
            .iter()
            .map(|e| (e.seq, &e.kind, &e.payload, &e.created_at))
            .collect::<Vec<_>>(),
        events
            .iter()
            .map(|e| (e.seq, &e.kind, &e.payload, &e.created_at))
            .collect::<Vec<_>>()
    );
    assert_eq!(search(&to, "otter").len(), 1);
}

/// A session's log as another database wrote it, its events at the times given (the
/// first is `session_started`'s).
fn history(texts: &[(&str, &str)]) -> Vec<Event> {
    let source = Db::sqlite();
    let from = source.open();
    let row = from.create_session(None, "sys".into()).unwrap();
    for (text, _) in &texts[1..] {
        from.append(row.id, &user(text)).unwrap();
    }
    let mut events = log(&from, row.id);
    for (e, (_, at)) in events.iter_mut().zip(texts) {
        e.created_at = (*at).into();
    }
    events
}

fn ordered(store: &Store, q: &str, order: SearchOrder, limit: u32) -> Vec<(SessionId, u64)> {
    store
        .search(&SearchQuery {
            text: q.into(),
            limit,
            order,
            ..SearchQuery::default()
        })
        .unwrap()
        .iter()
        .map(|h| (h.session_id, h.seq))
        .collect()
}

/// Issue 27 item 8: newest first is by each event's `created_at`, whatever order the
/// history arrived in. Imported after a live message, in the order "newer session
/// first, then one whose events straddle it", with ids the other way round.
fn newest_first_is_by_time_for_imported_history(db: &Db) {
    let store = db.open();
    let live = store.create_session(None, "sys".into()).unwrap().id;
    store.append(live, &user("otter, live")).unwrap();
    let mut ids = [SessionId::generate(), SessionId::generate()];
    ids.sort_by_key(|i| i.to_string());
    let (older, newer) = (ids[1], ids[0]);
    let newer_log = history(&[
        ("", "2020-02-01T00:00:00.000000Z"),
        ("otter in february", "2020-02-01T00:00:01.000000Z"),
    ]);
    let older_log = history(&[
        ("", "2020-01-01T00:00:00.000000Z"),
        ("otter in january", "2020-01-01T00:00:01.000000Z"),
        ("otter in march", "2020-03-01T00:00:00.000000Z"),
    ]);
    store
        .write(|w| w.import_session(newer, &newer_log))
        .unwrap();
    store
        .write(|w| w.import_session(older, &older_log))
        .unwrap();
    let hits = ordered(&store, "otter", SearchOrder::Recent, 10);
    assert_eq!(
        hits,
        [(live, 2), (older, 3), (newer, 2), (older, 2)],
        "newest first by time"
    );
    // Paging keeps the order.
    let second = store
        .search(&SearchQuery {
            text: "otter".into(),
            limit: 2,
            offset: 2,
            order: SearchOrder::Recent,
            ..SearchQuery::default()
        })
        .unwrap();
    let second: Vec<_> = second.iter().map(|h| (h.session_id, h.seq)).collect();
    assert_eq!(second, [(newer, 2), (older, 2)]);
}

/// Best first scores the newest matches by time: an imported old history full of the word
/// does not push out what was written today.
fn best_first_ranks_the_newest_by_time(db: &Db) {
    let store = db.open();
    let live = store.create_session(None, "sys".into()).unwrap().id;
    store.append(live, &user("one otter today")).unwrap();
    let mut old = vec![("", "2019-01-01T00:00:00.000000Z".to_string())];
    let n = brain::session::store::RANK_WINDOW as usize + 5;
    for i in 0..n {
        old.push((
            "otter otter otter",
            format!("2019-01-02T00:{:02}:{:02}.000000Z", i / 60 % 60, i % 60),
        ));
    }
    let texts: Vec<(&str, &str)> = old.iter().map(|(t, a)| (*t, a.as_str())).collect();
    let id = SessionId::generate();
    store
        .write(|w| w.import_session(id, &history(&texts)))
        .unwrap();
    let best = ordered(&store, "otter", SearchOrder::Relevance, 3000);
    assert_eq!(best.len(), brain::session::store::RANK_WINDOW as usize);
    assert!(best.contains(&(live, 2)), "today's match is in the window");
    assert!(
        !best.contains(&(id, 2)),
        "the oldest imported match is out of the window"
    );
}
