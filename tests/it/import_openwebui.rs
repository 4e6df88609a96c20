//! Open WebUI's chat export through the real `brain` binary (SPEC §15): the fixture
//! (tests/fixtures/import/openwebui.json, written from its export format) imports its
//! current branch with the others kept, again changes nothing, a grown copy adds only the
//! new messages, and a broken file imports nothing.

use brain::session::projection::{ItemBody, Role, ui_transcript};
use serde_json::{Value, json};

use crate::import::{context, export, failed, fixture, import, ok, session_of, write};
use crate::support::*;

const SOURDOUGH: &str = "6f1c2a9e-0b1d-4c52-9a57-1e0d3f5b7a10";
const UNICODE: &str = "0a8b7c6d-5e4f-4321-8765-fedcba987654";

fn texts(db: &TempDb, source: &str, id: &str, abandoned: bool) -> Vec<String> {
    let events = db.open().events(session_of(source, id), 0, None).unwrap();
    ui_transcript(&events, None)
        .into_iter()
        .filter(|i| i.abandoned == abandoned)
        .filter_map(|i| match i.body {
            ItemBody::User { text } | ItemBody::Assistant { text, .. } => Some(text),
            _ => None,
        })
        .collect()
}

#[test]
fn an_open_webui_export_imports_its_current_branch_and_keeps_the_others() {
    let db = TempDb::new();
    let report = ok(&import(&db, &fixture("openwebui.json"), &[]));
    assert!(
        report.contains("imported 3 conversations from openwebui: 3 created"),
        "{report}"
    );
    assert!(
        report.contains("left out: 1 file, 1 image, 1 image_url"),
        "{report}"
    );

    let (system, messages) = context(&db, session_of("openwebui", SOURDOUGH));
    assert_eq!(system, "You are a patient baker.");
    assert_eq!(
        messages,
        [
            (Role::User, "How do I start a sourdough starter?".to_owned()),
            (
                Role::Assistant,
                "Combine 50 g flour with 50 g water in a jar.".to_owned()
            ),
            (Role::User, "And then?".to_owned()),
            (Role::Assistant, "Feed it daily for a week.".to_owned()),
        ]
    );
    // The other answer to the first question is kept, shown, not sent to the model.
    let all: Vec<String> = [false, true]
        .into_iter()
        .flat_map(|a| texts(&db, "openwebui", SOURDOUGH, a))
        .collect();
    assert!(
        all.contains(&"Mix equal weights of flour and water.".to_owned()),
        "{all:?}"
    );
    let store = db.open();
    let events = store
        .events(session_of("openwebui", SOURDOUGH), 0, None)
        .unwrap();
    assert!(events[0].payload.contains(&format!(
        r#""imported_from":{{"id":"{SOURDOUGH}","source":"openwebui"}}"#
    )));
    let answer = events
        .iter()
        .find(|e| e.payload.contains("Feed it daily"))
        .unwrap();
    assert!(
        answer.payload.contains(r#""provider":"openwebui""#),
        "{answer:?}"
    );
    assert!(
        answer.payload.contains(r#""model":"llama3.1:8b""#),
        "{answer:?}"
    );
    // Seconds and milliseconds in one chat: the answer in ms sits where it happened.
    assert_eq!(answer.created_at, "2024-05-06T12:55:05.000000Z");
    let row = store.session(session_of("openwebui", SOURDOUGH)).unwrap();
    assert_eq!(row.title.as_deref(), Some("Sourdough starter"));

    let (_, unicode) = context(&db, session_of("openwebui", UNICODE));
    assert_eq!(
        unicode[0],
        (
            Role::User,
            "Translate 'crab' 🦀 into Japanese; also: שלום, e\u{301}".to_owned()
        )
    );
    assert_eq!(unicode[1], (Role::Assistant, "蟹 (かに, kani)".to_owned()));
    assert_eq!(
        unicode[2],
        (Role::User, "What is in this picture?".to_owned())
    );
    // Untimed messages take their time from their neighbours, in order.
    let times: Vec<String> = store
        .events(session_of("openwebui", UNICODE), 0, None)
        .unwrap()
        .into_iter()
        .map(|e| e.created_at)
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

#[test]
fn an_open_webui_export_again_changes_nothing_and_a_grown_copy_adds_only_the_new() {
    let db = TempDb::new();
    ok(&import(&db, &fixture("openwebui.json"), &[]));
    let before = export(&db);
    let again = ok(&import(
        &db,
        &fixture("openwebui.json"),
        &["--from", "openwebui"],
    ));
    assert!(
        again.contains("0 created, 0 extended, 3 unchanged, 0 forked; 0 messages"),
        "{again}"
    );
    assert_eq!(
        export(&db),
        before,
        "a second import must not change a byte"
    );

    let mut grown: Value =
        serde_json::from_slice(&std::fs::read(fixture("openwebui.json")).unwrap()).unwrap();
    let history = &mut grown[0]["chat"]["history"];
    history["messages"]["a2"]["childrenIds"] = json!(["u3"]);
    history["messages"]["u3"] = json!({"id": "u3", "parentId": "a2", "childrenIds": ["a3"],
        "role": "user", "content": "How warm should it be?", "timestamp": 1715000200});
    history["messages"]["a3"] = json!({"id": "a3", "parentId": "u3", "childrenIds": [],
        "role": "assistant", "content": "About 24 °C.", "model": "llama3.1:8b",
        "timestamp": 1715000203});
    history["currentId"] = json!("a3");
    let path = write(&db, "grown.json", &grown);
    let id = session_of("openwebui", SOURDOUGH);
    let n = db.open().events(id, 0, None).unwrap().len();
    let report = ok(&import(&db, &path, &[]));
    assert!(
        report.contains("0 created, 1 extended, 2 unchanged, 0 forked; 2 messages"),
        "{report}"
    );
    assert_eq!(db.open().events(id, 0, None).unwrap().len(), n + 2);
    assert_eq!(
        context(&db, id).1.last(),
        Some(&(Role::Assistant, "About 24 °C.".to_owned()))
    );
    let grown_export = export(&db);
    ok(&import(&db, &path, &[]));
    assert_eq!(export(&db), grown_export);
}

#[test]
fn a_broken_open_webui_export_imports_nothing_and_names_the_chat() {
    let db = TempDb::new();
    let text = std::fs::read_to_string(fixture("openwebui.json")).unwrap();
    let cut = &text[..text.find("Ünïcödé").unwrap()];
    let path = db.dir.path().join("cut.json");
    std::fs::write(&path, cut).unwrap();
    let err = failed(&import(&db, &path, &["--from", "openwebui"]));
    assert!(
        err.contains("conversation 1") && err.contains("nothing was imported"),
        "{err}"
    );
    assert!(db.open().session_ids().unwrap().is_empty());

    let good: Value = serde_json::from_str(&text).unwrap();
    for (bad, why) in [
        (
            json!({"id": "w1", "title": "Ghost", "chat": {"history": {"messages": {
                "a": {"role": "user", "content": "q", "parentId": "ghost"}}}}}),
            "\"ghost\"",
        ),
        (
            json!({"id": "w2", "title": "Loop", "chat": {"history": {"messages": {
                "a": {"role": "user", "content": "q", "parentId": "b"},
                "b": {"role": "assistant", "content": "r", "parentId": "a"}}}}}),
            "cycle",
        ),
        (
            json!({"id": "w3", "title": "Types", "chat": {"history": {"messages": 7}}}),
            "invalid type",
        ),
        (
            json!({"id": "w4", "title": "Bare", "chat": {}}),
            "chat.history",
        ),
    ] {
        let path = write(&db, "bad.json", &json!([good[0].clone(), bad]));
        let err = failed(&import(&db, &path, &[]));
        let id = bad["id"].as_str().unwrap();
        let title = bad["title"].as_str().unwrap();
        assert!(
            err.contains(&format!("conversation 1 ({id})"))
                && err.contains(title)
                && err.contains(why),
            "{err}"
        );
        assert!(db.open().session_ids().unwrap().is_empty(), "{why}");
    }
}
