//! The read side on either store: events, the context's tail, ids, the keyset list,
//! search and transcript pages, each equal to what the write side wrote.

use brain::session::store::{ListQuery, SearchQuery};

use super::{Db, log, new_session};
use crate::support::{answer, compaction, user};

conformance!(
    reads_return_what_the_writes_wrote,
    the_list_pages_newest_first_through_its_cursor,
    plain_search_finds_every_word_of_a_message,
    a_transcript_page_holds_the_newest_items,
);

fn reads_return_what_the_writes_wrote(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    store.append(id, &user("one")).unwrap();
    store.append(id, &answer(2, 1, "two")).unwrap();
    store.append(id, &compaction("so far", 3)).unwrap();
    store.append(id, &user("after")).unwrap();
    let all = log(&store, id);
    assert_eq!(store.events(id, 0, None).unwrap(), all);
    assert_eq!(store.events(id, 2, Some(1)).unwrap(), all[2..3]);
    assert_eq!(store.last_seq(id).unwrap(), 5);
    let context = store.events_for_context(id).unwrap();
    assert_eq!(
        context.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 4, 5]
    );
    assert_eq!(store.session(id).unwrap(), super::row(&store, id));
    assert_eq!(store.session_ids().unwrap(), vec![id]);
}

fn the_list_pages_newest_first_through_its_cursor(db: &Db) {
    let store = db.open();
    let ids: Vec<_> = (0..5).map(|_| new_session(&store)).collect();
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .list_sessions(&ListQuery {
                before,
                limit: 2,
                ..ListQuery::default()
            })
            .unwrap();
        seen.extend(page.sessions.iter().map(|s| s.id));
        match page.next {
            Some(c) => before = Some(c),
            None => break,
        }
    }
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);
}

fn plain_search_finds_every_word_of_a_message(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    store.append(id, &user("the quick brown fox")).unwrap();
    store.append(id, &user("a slow brown dog")).unwrap();
    let hits = store
        .search(&SearchQuery {
            text: "brown fox".into(),
            limit: 10,
            ..SearchQuery::default()
        })
        .unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!((hits[0].session_id, hits[0].seq), (id, 2));
    assert!(!hits[0].highlights.is_empty());
}

fn a_transcript_page_holds_the_newest_items(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    for i in 0..4 {
        let turn = store.append(id, &user(&format!("q{i}"))).unwrap().seq;
        store
            .append(id, &answer(turn, 1, &format!("a{i}")))
            .unwrap();
    }
    let end = store.last_seq(id).unwrap() + 1;
    let page = store.transcript_page(id, end, 2, None).unwrap();
    let whole = store.transcript_page(id, end, 100, None).unwrap();
    assert_eq!(
        format!("{:?}", page.items),
        format!("{:?}", &whole.items[whole.items.len() - 2..])
    );
}
