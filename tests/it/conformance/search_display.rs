//! What a search shows, on either store (issue 34 item 10): snippets without markdown,
//! words with symbols (`C++`) matched verbatim, stemmed search as an option, and a fork's
//! copies of its source's events shown once.

use brain::session::store::{SearchHit, SearchOrder, SearchQuery};
use brain::session::{SessionId, Store};

use super::Db;
use crate::support::{answer, user};

conformance!(
    snippets_show_no_markdown,
    words_with_symbols_match_as_typed,
    a_stemmed_search_finds_inflections_and_forgets_deleted_sessions,
    a_forks_copies_are_one_hit_listing_the_forks,
);

fn query(text: &str, order: SearchOrder, stem: bool) -> SearchQuery {
    SearchQuery {
        text: text.into(),
        limit: 50,
        order,
        stem,
        ..SearchQuery::default()
    }
}

fn find(store: &Store, text: &str) -> Vec<SearchHit> {
    store
        .search(&query(text, SearchOrder::Relevance, false))
        .unwrap()
}

fn highlighted(hit: &SearchHit) -> Vec<String> {
    let chars: Vec<char> = hit.snippet.chars().collect();
    hit.highlights
        .iter()
        .map(|r| chars[r[0]..r[1]].iter().collect())
        .collect()
}

fn session_with(store: &Store, texts: &[&str]) -> SessionId {
    let id = store.create_session(None, "sys".into()).unwrap().id;
    for t in texts {
        store.append(id, &user(t)).unwrap();
    }
    id
}

fn snippets_show_no_markdown(db: &Db) {
    let store = db.open();
    session_with(
        &store,
        &["## Plan\n- **Hostels** near `Porto`, see [the list](https://example.com/porto)"],
    );
    let hits = find(&store, "hostels porto");
    assert_eq!(hits.len(), 1);
    let h = &hits[0];
    assert_eq!(h.snippet, "Plan\nHostels near Porto, see the list", "{h:?}");
    assert_eq!(highlighted(h), ["Hostels", "Porto"]);
}

fn words_with_symbols_match_as_typed(db: &Db) {
    let store = db.open();
    session_with(
        &store,
        &[
            "I write C++ every day",           // 2
            "C is a small language",           // 3
            "a C# program, and F# too",        // 4
            "node.js or node js, either way",  // 5
            "the cat sat in a c-shaped chair", // 6
        ],
    );
    for (q, seqs, marks) in [
        ("C++", vec![2], vec!["C++"]),
        ("c++", vec![2], vec!["C++"]),
        ("C#", vec![4], vec!["C#"]),
        ("node.js", vec![5], vec!["node.js", "node js"]),
        ("C++ day", vec![2], vec!["C++", "day"]),
    ] {
        for order in [SearchOrder::Relevance, SearchOrder::Recent] {
            let hits = store.search(&query(q, order, false)).unwrap();
            let found: Vec<u64> = hits.iter().map(|h| h.seq).collect();
            assert_eq!(found, seqs, "{q:?} {order:?}: {hits:?}");
            assert_eq!(highlighted(&hits[0]), marks, "{q:?}: {:?}", hits[0]);
        }
    }
    // The letter alone is still the letter.
    let c: Vec<u64> = find(&store, "c").iter().map(|h| h.seq).collect();
    assert!(c.contains(&3) && c.contains(&6), "{c:?}");
}

fn a_stemmed_search_finds_inflections_and_forgets_deleted_sessions(db: &Db) {
    let store = db.open();
    let a = session_with(
        &store,
        &["we stayed in two hostels", "the parties ran late"],
    );
    let seq = store.append(a, &user("which hostel")).unwrap().seq;
    store
        .append(a, &answer(seq, 1, "Hostelling is cheap"))
        .unwrap();
    assert!(find(&store, "hostel").iter().all(|h| h.seq != 2));
    for order in [SearchOrder::Relevance, SearchOrder::Recent] {
        let hits = store.search(&query("hostel", order, true)).unwrap();
        let mut seqs: Vec<u64> = hits.iter().map(|h| h.seq).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, [2, 4, 5], "{order:?}: {hits:?}");
        let two = hits.iter().find(|h| h.seq == 2).unwrap();
        assert_eq!(highlighted(two), ["hostels"], "{two:?}");
        let party = store.search(&query("party", order, true)).unwrap();
        assert_eq!(party.len(), 1, "{party:?}");
    }
    store.delete_session(a).unwrap();
    store.purge_pending(i64::MAX).unwrap();
    assert!(
        store
            .search(&query("hostel", SearchOrder::Recent, true))
            .unwrap()
            .is_empty()
    );
    let b = session_with(&store, &["hostels again"]);
    let again = store
        .search(&query("hostel", SearchOrder::Recent, true))
        .unwrap();
    assert_eq!(again.iter().map(|h| h.session_id).collect::<Vec<_>>(), [b]);
}

fn a_forks_copies_are_one_hit_listing_the_forks(db: &Db) {
    let store = db.open();
    let source = session_with(&store, &["hostels in Porto"]);
    store
        .append(source, &answer(2, 1, "Porto has many"))
        .unwrap();
    let fork = store
        .write(|w| w.fork(source, Some(3), None, u64::MAX))
        .unwrap()
        .id;
    let deeper = store
        .write(|w| w.fork(fork, Some(2), None, u64::MAX))
        .unwrap()
        .id;
    // Past its fork point the fork's own words are its own hit.
    store.append(fork, &user("Porto again")).unwrap();
    // The same words in an unrelated session are another event.
    let other = session_with(&store, &["hostels in Porto"]);
    for order in [SearchOrder::Relevance, SearchOrder::Recent] {
        let hits = store.search(&query("porto", order, false)).unwrap();
        let mut keys: Vec<(SessionId, u64, Vec<SessionId>)> = hits
            .iter()
            .map(|h| {
                let copies = h.also_in.iter().map(|c| c.session_id).collect();
                (h.session_id, h.seq, copies)
            })
            .collect();
        keys.sort();
        let mut want = vec![
            (source, 2, vec![fork, deeper]),
            (source, 3, vec![fork]),
            (fork, 4, vec![]),
            (other, 2, vec![]),
        ];
        want.sort();
        assert_eq!(keys, want, "{order:?}: {hits:?}");
    }
}
