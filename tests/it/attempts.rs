//! The edges of an attempt (issue 14): stop and shutdown in every phase, a compaction's
//! deadline, panics and limits, what is kept for late subscribers, and what moves a
//! session in the list.

use std::time::Duration;

use brain::chat::engine::EngineSettings;
use brain::chat::frames::{EndStatus, Frame, Next};
use brain::session::events::TitledBy;
use brain::session::store::ListQuery;
use serde_json::json;

use crate::engine::*;
use crate::support::*;

fn updated_at(r: &Rig, id: brain::session::SessionId) -> String {
    r.store.session(id).unwrap().updated_at
}

#[test]
fn checkpoints_renames_and_archiving_do_not_move_updated_at() {
    let mock = MockLlm::start(&[]);
    let settings = EngineSettings {
        checkpoint_interval: Duration::from_millis(100),
        ..quiet()
    };
    let r = rig_with(&mock.url, settings, 2000);
    let id = session(&r);
    let other = session(&r);
    mock.script(json!({"kind": "stream", "text": "one two three four five six", "delay_ms": 120}));
    let mut sub = r.engine.send(id, "stream slowly", None).unwrap();
    let after_user_message = updated_at(&r, id);
    let mut checkpoints = 0;
    let mut all = Vec::new();
    loop {
        match sub.next_frame(Duration::from_secs(30)) {
            Next::Frame(Frame::Checkpoint { seq }) => {
                checkpoints += 1;
                if r.engine.turn_active(id) {
                    assert_eq!(
                        updated_at(&r, id),
                        after_user_message,
                        "checkpoint #{seq} moved updated_at"
                    );
                }
                all.push(Frame::Checkpoint { seq });
            }
            Next::Frame(f) => all.push(f),
            Next::Ended => break,
            Next::Idle => panic!("stalled: {all:?}"),
        }
    }
    assert!(checkpoints >= 2, "{all:?}");
    assert_eq!(end(&all).0, EndStatus::Completed);
    let ended = updated_at(&r, id);
    assert!(ended > after_user_message, "the attempt's end moves it");

    // The other session is older; renaming or archiving it does not bring it forward.
    let order = |r: &Rig| -> Vec<_> {
        r.store
            .list_sessions(&ListQuery {
                limit: 50,
                archived: Some(brain::session::cursor::ArchivedFilter::Include),
                ..ListQuery::default()
            })
            .unwrap()
            .sessions
            .iter()
            .map(|s| s.id)
            .collect()
    };
    let before = order(&r);
    assert_eq!(before[0], id);
    r.store
        .rename(other, "renamed".into(), TitledBy::User)
        .unwrap();
    r.store.set_archived(other, true).unwrap();
    r.store.set_archived(other, false).unwrap();
    assert_eq!(order(&r), before);
    assert_eq!(updated_at(&r, id), ended);
}

#[test]
fn an_interrupted_attempt_moves_updated_at_when_it_ends() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    mock.script(json!({"kind": "stream", "text": "a b c d e f g", "delay_ms": 200}));
    let mut sub = r.engine.send(id, "talk slowly", None).unwrap();
    let after_user_message = updated_at(&r, id);
    while !matches!(
        sub.next_frame(Duration::from_secs(10)),
        Next::Frame(Frame::Chunk { .. })
    ) {}
    r.engine.stop(id).unwrap();
    let f: Vec<Frame> = sub.collect();
    assert_eq!(end(&f).0, EndStatus::Interrupted);
    assert!(updated_at(&r, id) > after_user_message);
}
