//! Importing other tools' history (SPEC §15) through the real `brain` binary, on fixture
//! files written from each tool's documented export format: what the model and a person
//! see afterwards, idempotency (byte-identical export after a second import), a grown copy
//! (only the new messages), a diverged copy (a fork), and broken files (nothing imported).

use std::path::{Path, PathBuf};
use std::process::Output;

use brain::session::SessionId;
use brain::session::projection::{ItemBody, Role, llm_context, ui_transcript};
use serde_json::{Value, json};

use crate::support::*;

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(name)
}

pub fn brain(db: &TempDb, args: &[&str], stdin: &[u8]) -> Output {
    run_brain_on(db, args, stdin)
}

pub fn import(db: &TempDb, file: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["sessions", "import", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    brain(db, &args, b"")
}

pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

pub fn failed(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn export(db: &TempDb) -> Vec<u8> {
    ok(&brain(db, &["sessions", "export", "--all"], b"")).into_bytes()
}

pub fn write(dir: &TempDb, name: &str, v: &Value) -> PathBuf {
    let path = dir.dir.path().join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    path
}

pub fn session_of(source: &str, id: &str) -> SessionId {
    brain::import::convert::session_id(source, id)
}

pub fn context(db: &TempDb, id: SessionId) -> (String, Vec<(Role, String)>) {
    let store = db.open();
    let c = llm_context(&store.events(id, 0, None).unwrap());
    let m = c
        .messages
        .into_iter()
        .map(|m| (m.role, m.content))
        .collect();
    (c.system, m)
}

const A: &str = "6630a1b0-0000-4000-8000-00000000000a";
const B: &str = "6630a1b0-0000-4000-8000-00000000000b";

#[test]
fn a_chatgpt_export_imports_its_current_path_and_keeps_every_branch() {
    let db = TempDb::new();
    let report = ok(&import(&db, &fixture("chatgpt.json"), &[]));
    assert!(
        report.contains("imported 2 conversations from chatgpt: 2 created, 0 extended, 0 unchanged, 0 forked; 10 messages"),
        "{report}"
    );
    assert!(
        report.contains("left out: 3 image_asset_pointer"),
        "{report}"
    );
    assert!(report.contains("writer held"), "{report}");

    let (system, messages) = context(&db, session_of("chatgpt", A));
    assert_eq!(system, "You are helpful. 🦀");
    assert_eq!(
        messages,
        [
            (Role::User, "What is 2+2? ünïcödé".to_owned()),
            // The model's code sent to python is its call, not its words: the tool's
            // output is kept as the tool's record, the answer after it as the answer.
            (Role::Assistant, "It is 4.".to_owned()),
            (Role::User, "Look at this".to_owned()),
            (Role::Assistant, "Nice picture.".to_owned()),
        ]
    );
    let store = db.open();
    let events = store.events(session_of("chatgpt", A), 0, None).unwrap();
    let items = ui_transcript(&events, None);
    let abandoned: Vec<String> = items
        .iter()
        .filter(|i| i.abandoned)
        .filter_map(|i| match &i.body {
            ItemBody::User { text } => Some(text.clone()),
            ItemBody::Assistant { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(abandoned, ["What is 3+3?", "6", "5"]);
    let tool = items.iter().find_map(|i| match &i.body {
        ItemBody::Tool(t) => Some(t.clone()),
        _ => None,
    });
    assert_eq!(
        tool.map(|t| (t.name, t.status)),
        Some(("python".into(), "ok".into()))
    );
    assert!(events[0].payload.contains(&format!(
        r#""imported_from":{{"id":"{A}","source":"chatgpt"}}"#
    )));
    // Times come from the source; the missing one sits between its neighbours.
    let row = store.session(session_of("chatgpt", A)).unwrap();
    assert_eq!(row.title.as_deref(), Some("Branches & tools ☕"));
    assert_eq!(row.created_at, "2024-05-01T10:00:00.250000Z");
    assert_eq!(row.updated_at, "2024-05-01T10:00:08.000000Z");
    let u2 = events
        .iter()
        .find(|e| e.payload.contains("Look at this"))
        .unwrap();
    assert_eq!(u2.created_at, "2024-05-01T10:00:06.500000Z");

    let (_, pictures) = context(&db, session_of("chatgpt", B));
    assert_eq!(
        pictures[0],
        (Role::User, "[not imported: 2 image_asset_pointer]".into())
    );
    assert_eq!(pictures[1], (Role::Assistant, "Two cats. 猫".into()));
}

#[test]
fn importing_again_changes_nothing_and_a_grown_copy_adds_only_the_new_messages() {
    let db = TempDb::new();
    ok(&import(&db, &fixture("chatgpt.json"), &[]));
    let before = export(&db);
    let again = ok(&import(
        &db,
        &fixture("chatgpt.json"),
        &["--from", "chatgpt"],
    ));
    assert!(
        again.contains("0 created, 0 extended, 2 unchanged, 0 forked; 0 messages"),
        "{again}"
    );
    assert_eq!(
        export(&db),
        before,
        "a second import must not change a byte"
    );

    let mut grown: Value =
        serde_json::from_slice(&std::fs::read(fixture("chatgpt.json")).unwrap()).unwrap();
    let conv = &mut grown[0];
    conv["mapping"]["a5"]["children"] = json!(["u3"]);
    conv["mapping"]["u3"] = json!({"id": "u3", "parent": "a5", "children": ["a7"], "message": {"author": {"role": "user"}, "create_time": 1714557800.0, "content": {"content_type": "text", "parts": ["And 5+5?"]}}});
    conv["mapping"]["a7"] = json!({"id": "a7", "parent": "u3", "children": [], "message": {"author": {"role": "assistant"}, "create_time": 1714557801.0, "content": {"content_type": "text", "parts": ["10"]}, "metadata": {"model_slug": "gpt-4o"}}});
    conv["current_node"] = json!("a7");
    let path = write(&db, "grown.json", &grown);
    let id = session_of("chatgpt", A);
    let n = db.open().events(id, 0, None).unwrap().len();
    let report = ok(&import(&db, &path, &[]));
    assert!(
        report.contains("0 created, 1 extended, 1 unchanged, 0 forked; 2 messages"),
        "{report}"
    );
    let events = db.open().events(id, 0, None).unwrap();
    assert_eq!(events.len(), n + 2);
    assert_eq!(
        context(&db, id).1.last(),
        Some(&(Role::Assistant, "10".to_owned()))
    );
    let grown_export = export(&db);
    ok(&import(&db, &path, &[]));
    assert_eq!(export(&db), grown_export);

    // An earlier message changed: a fork, named in the report, and stable on re-import.
    grown[0]["mapping"]["u1"]["message"]["content"]["parts"] = json!(["What is two plus two?"]);
    let path = write(&db, "diverged.json", &grown);
    let report = ok(&import(&db, &path, &[]));
    assert!(
        report.contains("0 created, 0 extended, 1 unchanged, 1 forked"),
        "{report}"
    );
    assert!(
        report.contains(&format!("forked: {A} “Branches & tools ☕” differs")),
        "{report}"
    );
    assert!(
        report.contains(&format!("(a fork of {id} at #")),
        "{report}"
    );
    let forked_export = export(&db);
    let again = ok(&import(&db, &path, &[]));
    assert!(again.contains("2 unchanged, 0 forked"), "{again}");
    assert_eq!(export(&db), forked_export);
    assert_eq!(db.open().session_ids().unwrap().len(), 3);

    // The diverged conversation grows again: its fork is extended, not forked anew
    // (found by an outside review: every later export made one more copy).
    let conv = &mut grown[0];
    conv["mapping"]["a7"]["children"] = json!(["u4"]);
    conv["mapping"]["u4"] = json!({"id": "u4", "parent": "a7", "children": [], "message": {"author": {"role": "user"}, "create_time": 1714557900.0, "content": {"content_type": "text", "parts": ["Thanks!"]}}});
    conv["current_node"] = json!("u4");
    let path = write(&db, "diverged-grown.json", &grown);
    let report = ok(&import(&db, &path, &[]));
    assert!(
        report.contains("0 created, 1 extended, 1 unchanged, 0 forked; 1 message"),
        "{report}"
    );
    assert_eq!(db.open().session_ids().unwrap().len(), 3);
}

/// Renaming or archiving an imported chat in brain does not make its next, grown export a
/// fork: the new messages are appended after the user's tidying, and importing that
/// export again changes nothing (found by an outside review: it copied the whole history
/// into a new session).
#[test]
fn a_renamed_and_archived_import_still_grows_in_place() {
    let db = TempDb::new();
    ok(&import(&db, &fixture("chatgpt.json"), &[]));
    let id = session_of("chatgpt", A);
    let store = db.open();
    store
        .rename(
            id,
            "My own title".into(),
            brain::session::events::TitledBy::User,
        )
        .unwrap();
    store.set_archived(id, true).unwrap();
    drop(store);
    let mut grown: Value =
        serde_json::from_slice(&std::fs::read(fixture("chatgpt.json")).unwrap()).unwrap();
    let conv = &mut grown[0];
    conv["mapping"]["a5"]["children"] = json!(["u3"]);
    conv["mapping"]["u3"] = json!({"id": "u3", "parent": "a5", "children": ["a7"], "message": {"author": {"role": "user"}, "create_time": 1714557800.0, "content": {"content_type": "text", "parts": ["And 5+5?"]}}});
    conv["mapping"]["a7"] = json!({"id": "a7", "parent": "u3", "children": [], "message": {"author": {"role": "assistant"}, "create_time": 1714557801.0, "content": {"content_type": "text", "parts": ["10"]}, "metadata": {"model_slug": "gpt-4o"}}});
    conv["current_node"] = json!("a7");
    let path = write(&db, "grown.json", &grown);
    let report = ok(&import(&db, &path, &[]));
    assert!(
        report.contains("0 created, 1 extended, 1 unchanged, 0 forked; 2 messages"),
        "{report}"
    );
    assert_eq!(db.open().session_ids().unwrap().len(), 2, "no copy");
    let (_, messages) = context(&db, id);
    assert_eq!(
        &messages[messages.len() - 2..],
        [
            (Role::User, "And 5+5?".to_owned()),
            (Role::Assistant, "10".to_owned())
        ]
    );
    let row = db.open().session(id).unwrap();
    assert_eq!(row.title.as_deref(), Some("My own title"));
    let after = export(&db);
    let again = ok(&import(&db, &path, &[]));
    assert!(
        again.contains("0 extended, 2 unchanged, 0 forked"),
        "{again}"
    );
    assert_eq!(export(&db), after);
}

#[test]
fn a_broken_file_imports_nothing_and_names_the_conversation() {
    let db = TempDb::new();
    let text = std::fs::read_to_string(fixture("chatgpt.json")).unwrap();
    // The second conversation cut off: the first, although readable, is not kept either.
    let cut = &text[..text.find("Only pictures").unwrap() + 40];
    let path = db.dir.path().join("cut.json");
    std::fs::write(&path, cut).unwrap();
    let err = failed(&import(&db, &path, &[]));
    assert!(
        err.contains("conversation 1")
            && err.contains("truncated")
            && err.contains("nothing was imported"),
        "{err}"
    );
    assert!(db.open().session_ids().unwrap().is_empty());

    // Wrong types and broken trees, after a good conversation.
    let good: Value = serde_json::from_str(&text).unwrap();
    for (bad, why) in [
        (
            json!({"id": "x1", "title": "Bad", "mapping": {"a": {"message": {"author": {"role": "user"}, "content": {"parts": ["q"]}}, "parent": "ghost"}}}),
            "does not exist",
        ),
        (
            json!({"id": "x2", "title": "Loop", "mapping": {"a": {"message": {"author": {"role": "user"}, "content": {"parts": ["q"]}}, "parent": "b"}, "b": {"message": {"author": {"role": "user"}, "content": {"parts": ["r"]}}, "parent": "a"}}}),
            "cycle",
        ),
        (
            json!({"id": "x3", "title": "Types", "mapping": 7}),
            "no `mapping`",
        ),
    ] {
        let path = write(&db, "bad.json", &json!([good[0].clone(), bad]));
        let err = failed(&import(&db, &path, &[]));
        let id = bad["id"].as_str().unwrap();
        assert!(
            err.contains(&format!("conversation 1 ({id})")) && err.contains(why),
            "{err}"
        );
        assert!(db.open().session_ids().unwrap().is_empty(), "{why}");
    }
}

#[test]
fn the_format_is_recognised_and_a_wrong_from_says_what_the_file_is() {
    let db = TempDb::new();
    let err = failed(&import(
        &db,
        &fixture("chatgpt.json"),
        &["--from", "claude"],
    ));
    assert!(
        err.contains("looks like a ChatGPT export") && err.contains("--from chatgpt"),
        "{err}"
    );
    let err = failed(&import(&db, &fixture("claude.json"), &["--from", "brain"]));
    assert!(err.contains("looks like a Claude export"), "{err}");
    let path = db.dir.path().join("notes.txt");
    std::fs::write(&path, "hello").unwrap();
    let err = failed(&import(&db, &path, &[]));
    assert!(
        err.contains("cannot tell which tool") && err.contains("neither JSON"),
        "{err}"
    );
    // Standard input, recognised all the same.
    let piped = brain(
        &db,
        &["sessions", "import", "-"],
        &std::fs::read(fixture("claude.json")).unwrap(),
    );
    assert!(ok(&piped).contains("from claude: 2 created"));
}

#[test]
fn a_claude_export_imports_its_chain_and_again_changes_nothing() {
    let db = TempDb::new();
    let report = ok(&import(&db, &fixture("claude.json"), &[]));
    assert!(
        report.contains("2 created, 0 extended, 0 unchanged, 0 forked; 4 messages"),
        "{report}"
    );
    assert!(report.contains("left out: 1 file, 1 tool_use"), "{report}");
    let id = session_of("claude", "0b7c4a0e-1111-4222-8333-444455556666");
    assert_eq!(
        context(&db, id).1,
        [
            // The pasted attachment's text is kept with the message.
            (
                Role::User,
                "Suggest a name for my boat.\n\nA small boat".to_owned()
            ),
            (Role::Assistant, "How about “Ünsinkable II”?".to_owned()),
            (Role::User, "Shorter, please.".to_owned()),
            (Role::Assistant, "“Floe”.".to_owned()),
        ]
    );
    let store = db.open();
    let events = store.events(id, 0, None).unwrap();
    assert!(events[2].payload.contains(r#""provider":"claude""#));
    assert_eq!(events[3].created_at, "2024-05-01T10:00:32.500000Z");
    let before = export(&db);
    assert!(ok(&import(&db, &fixture("claude.json"), &[])).contains("2 unchanged"));
    assert_eq!(export(&db), before);
}

#[test]
fn a_ten_thousand_message_conversation_imports_whole_and_once() {
    const N: usize = 10_000;
    let db = TempDb::new();
    let mut mapping = serde_json::Map::new();
    for i in 0..N {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        mapping.insert(
            format!("n{i}"),
            json!({"parent": (i > 0).then(|| format!("n{}", i - 1)), "children": [format!("n{}", i + 1)],
                   "message": {"author": {"role": role}, "create_time": 1714557600.0 + i as f64,
                               "content": {"content_type": "text", "parts": [format!("message {i}")]}}}),
        );
    }
    let conv = json!([{"id": "long", "title": "Long", "create_time": 1714557600.0, "mapping": mapping, "current_node": format!("n{}", N - 1)}]);
    let path = write(&db, "long.json", &conv);
    // Children that do not exist are ignored: the parent links make the tree.
    let report = ok(&import(&db, &path, &[]));
    assert!(report.contains(&format!("{N} messages")), "{report}");
    let (_, messages) = context(&db, session_of("chatgpt", "long"));
    assert_eq!(messages.len(), N);
    assert_eq!(messages[N - 1].1, format!("message {}", N - 1));
    let before = export(&db);
    assert!(ok(&import(&db, &path, &[])).contains("1 unchanged"));
    assert_eq!(export(&db), before);
}

/// Issue 34 (7): an imported answer knows no usage or time; `sessions show` said
/// "0 in, 0 cached, 0 out; 0 ms" on each.
#[test]
fn an_imported_answer_shows_no_usage_it_does_not_know() {
    let db = TempDb::new();
    ok(&import(&db, &fixture("chatgpt.json"), &[]));
    let id = session_of("chatgpt", A).to_string();
    let shown = ok(&crate::support::run_brain_on(
        &db,
        &["sessions", "show", &id],
        b"",
    ));
    assert!(shown.contains("assistant (turn "), "{shown}");
    assert!(
        !shown.contains("0 in, 0 cached, 0 out") && !shown.contains("; 0 ms;"),
        "{shown}"
    );
}
