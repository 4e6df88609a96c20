//! Edits and forks from the terminal, on a real file: `brain sessions fork` (in-process,
//! and through the server holding the database) and search hits in abandoned branches.

use std::process::{Command, Output};

use serde_json::Value;

use brain::session::projection::llm_context;

use crate::server::{Brain, call};
use crate::support::*;

fn brain(db: &TempDb, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(db.path())
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A titled session whose first message was edited: 2 user, 3 answer, 4 rewind, 5 user.
fn edited_session(db: &TempDb) -> String {
    let store = db.open();
    let id = store
        .create_session(Some("notes".into()), "sys".into())
        .unwrap()
        .id;
    store.append(id, &user("alpha apples")).unwrap();
    store.append(id, &answer(2, 1, "fine apples")).unwrap();
    store
        .write(|w| w.edit(id, 2, "alpha apples, revised"))
        .unwrap();
    id.to_string()
}

#[test]
fn search_finds_abandoned_versions_and_says_so() {
    let db = TempDb::new();
    let id = edited_session(&db);
    let out = brain(&db, &["sessions", "search", "alpha", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let hits: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let mut got: Vec<(u64, bool)> = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["seq"].as_u64().unwrap(),
                h["abandoned"].as_bool().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(got, vec![(2, true), (5, false)]);
    let text = stdout(&brain(&db, &["sessions", "search", "alpha"]));
    assert!(text.contains(&format!("{id}  #2 ")), "{text}");
    assert_eq!(text.matches("(earlier version)").count(), 1, "{text}");
    // And through the API.
    let mock = MockLlm::start(&[]);
    let b = Brain::start(&db, &mock.url, &[]);
    let (_, hits) = call(&b, "GET", "/v1/search?q=apples", None);
    let abandoned: Vec<bool> = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["seq"] == 2 || h["seq"] == 3)
        .map(|h| h["abandoned"].as_bool().unwrap())
        .collect();
    assert_eq!(abandoned, vec![true, true], "{hits}");
}

#[test]
fn sessions_fork_in_process_and_through_the_server() {
    let db = TempDb::new();
    let id = edited_session(&db);
    let out = brain(&db, &["sessions", "fork", &id, "--at", "3"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let fork = text.split('\t').next().unwrap().trim().to_owned();
    assert!(text.contains("notes (fork)"), "{text}");
    let events = |fid: &str| -> Vec<Value> {
        let out = brain(&db, &["sessions", "show", fid, "--events", "--json"]);
        assert!(out.status.success(), "{out:?}");
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        v["events"].as_array().unwrap().clone()
    };
    let (source, copy) = (events(&id), events(&fork));
    assert_eq!(copy.len(), 3);
    assert_eq!(copy[1..], source[1..3]);
    assert_eq!(copy[0]["payload"]["forked_from"]["seq"], 3);
    let list = stdout(&brain(&db, &["sessions", "list"]));
    assert!(
        list.contains("notes (fork)") && list.contains(&fork),
        "{list}"
    );
    // Bad points are refused, nothing written.
    for bad in [&["--at", "0"][..], &["--at", "99"], &["--at", "-1"]] {
        let mut args = vec!["sessions", "fork", id.as_str()];
        args.extend_from_slice(bad);
        let out = brain(&db, &args);
        assert!(!out.status.success(), "{bad:?}: {out:?}");
    }
    let out = brain(&db, &["sessions", "fork", &id, "--at", "99"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("past the end"),
        "{out:?}"
    );

    // With a server holding the database, the fork goes through it.
    let mock = MockLlm::start(&[]);
    let b = Brain::start(&db, &mock.url, &[]);
    let out = brain(&db, &["sessions", "fork", &id, "--json"]);
    assert!(out.status.success(), "{out:?}");
    let made: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let fid = made["id"].as_str().unwrap();
    let (status, got) = call(&b, "GET", &format!("/v1/sessions/{fid}/events"), None);
    assert_eq!(status, 200);
    assert_eq!(got["events"].as_array().unwrap().len(), source.len());
    let (_, a) = call(&b, "GET", &format!("/v1/sessions/{id}/context"), None);
    let (_, f) = call(&b, "GET", &format!("/v1/sessions/{fid}/context"), None);
    assert_eq!(a, f);
}

fn chat(db: &TempDb, args: &[&str], stdin: &str) -> String {
    let out = run_brain_on(db, args, stdin.as_bytes());
    assert!(out.status.success(), "{out:?}");
    stdout(&out)
}

/// `/edit` (inline and asked for) and `/fork` in `brain chat`, checked in the log.
fn edit_and_fork_in_chat(db: &TempDb, args: &[&str]) {
    let out = chat(
        db,
        args,
        "first line\nsecond line\n/edit second, inline\n/edit\nsecond, asked\n/fork\nin the fork\n",
    );
    assert!(
        out.contains("to: second, inline") && out.contains("to: second, asked"),
        "{out}"
    );
    assert!(out.contains("new text › second, asked"), "{out}");
    let fork: String = out
        .split("[forked into session ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    let store = db.open();
    let source = crate::support::chat_session(&out).parse().unwrap();
    let kinds = |id| -> Vec<String> {
        store
            .events(id, 0, None)
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .filter(|k| k != "turn_memory" && k != "session_titled")
            .collect()
    };
    let src = kinds(source);
    assert_eq!(src.iter().filter(|k| *k == "rewind").count(), 2, "{src:?}");
    // What the model sees, turn memory (written in the background, in-process) aside.
    let said = |id| -> Vec<String> {
        llm_context(&store.events_for_context(id).unwrap())
            .messages
            .iter()
            .flat_map(|m| {
                m.content
                    .split("\n\n")
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .filter(|t| !t.starts_with("[turn memory]"))
            .collect()
    };
    let texts = said(source);
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert_eq!(texts[0], "first line");
    assert_eq!(texts[2], "second, asked");
    // The fork holds the source's conversation and then the message sent in it.
    let forked = said(fork.parse().unwrap());
    assert_eq!(forked[..4], texts[..]);
    assert_eq!(forked[4], "in the fork");
}

#[test]
fn chat_edit_and_fork_in_process_and_through_the_server() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    edit_and_fork_in_chat(&db, &["chat", "--provider-url", &mock.url]);
    let db = TempDb::new();
    let _b = Brain::start(&db, &mock.url, &[]);
    edit_and_fork_in_chat(&db, &["chat"]);
}
