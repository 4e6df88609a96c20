//! The `sessions` cache row: what the log says, on either store (create, rename, archive,
//! touch), with timestamps read back byte for byte.

use brain::clock::Clock;
use brain::session::events::TitledBy;
use brain::session::{Decoded, Event, StoreError};
use jiff::SignedDuration;

use super::{Db, log, row};
use crate::support::{archived, titled, user};

conformance!(
    creating_a_session_writes_its_row_and_session_started,
    renames_and_archives_change_the_row_as_the_log_says,
    touch_moves_updated_at_and_refuses_an_unknown_session,
);

fn clock() -> Clock {
    // One microsecond past the second: a formatting slip (dropped zeros) would show.
    Clock::manual("2026-11-30T04:17:26.000001Z".parse().unwrap())
}

/// The `updated_at` the log implies: the newest event whose effect moves it.
fn implied_updated_at(events: &[Event]) -> String {
    let mut at = events[0].created_at.clone();
    for e in &events[1..] {
        if let Decoded::Known(p) = e.decode() {
            if p.cache_effect().touches_updated_at {
                at = e.created_at.clone();
            }
        }
    }
    at
}

fn creating_a_session_writes_its_row_and_session_started(db: &Db) {
    let clock = clock();
    let store = db.open_with(clock.clone());
    let created = store
        .create_session(Some("plans".into()), "be brief".into())
        .unwrap();
    assert_eq!(created.title.as_deref(), Some("plans"));
    assert_eq!(created.system, "be brief");
    assert!(!created.archived);
    assert_eq!(created.created_at, "2026-11-30T04:17:26.000001Z");
    assert_eq!(created.updated_at, created.created_at);
    let events = log(&store, created.id);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "session_started");
    assert_eq!(events[0].created_at, created.created_at);
    assert_eq!(row(&store, created.id), created);
}

fn renames_and_archives_change_the_row_as_the_log_says(db: &Db) {
    let clock = clock();
    let store = db.open_with(clock.clone());
    let id = store.create_session(None, "s".into()).unwrap().id;
    let step = |store: &brain::session::Store| {
        clock.advance(SignedDuration::from_millis(1));
        let events = log(store, id);
        let r = row(store, id);
        assert_eq!(r.updated_at, implied_updated_at(&events));
        r
    };
    assert_eq!(step(&store).title, None);
    let renamed = store.rename(id, "first".into(), TitledBy::User).unwrap();
    assert_eq!(renamed.title.as_deref(), Some("first"));
    assert_eq!(step(&store).title.as_deref(), Some("first"));
    let before = log(&store, id).len();
    store.rename(id, "first".into(), TitledBy::User).unwrap();
    assert_eq!(
        log(&store, id).len(),
        before,
        "the same title writes nothing"
    );
    store.append(id, &titled("second", TitledBy::Auto)).unwrap();
    assert_eq!(step(&store).title.as_deref(), Some("second"));
    assert!(store.set_archived(id, true).unwrap().archived);
    assert!(step(&store).archived);
    store.append(id, &archived(false)).unwrap();
    assert!(!step(&store).archived);
    store.append(id, &user("hello")).unwrap();
    step(&store);
}

fn touch_moves_updated_at_and_refuses_an_unknown_session(db: &Db) {
    let clock = clock();
    let store = db.open_with(clock.clone());
    let id = store.create_session(None, "s".into()).unwrap().id;
    clock.advance(SignedDuration::from_secs(5));
    store.write(|w| w.touch(id)).unwrap();
    assert_eq!(row(&store, id).updated_at, "2026-11-30T04:17:31.000001Z");
    let ghost = brain::session::SessionId::generate();
    let e = store.write(|w| w.touch(ghost)).unwrap_err();
    assert!(matches!(e, StoreError::SessionNotFound(_)), "{e}");
}
