//! A laptop's history moved to a team's PostgreSQL (SPEC §16) with real processes:
//! `brain sessions export --all | brain sessions import - --db postgres://…`, then a server
//! on each database answers the same: transcripts, contexts, the list and search hits.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use crate::testdb;
use brain::session::{Decoded, Event, Payload, SessionId, Store};
use serde_json::Value;

use crate::server::{Brain, call};
use crate::support::*;
use crate::team_e2e::serve_on;

/// A known event from its kind and JSON (the tool events have no helper of their own).
fn known(kind: &str, json: &str) -> Payload {
    let probe = Event {
        seq: 0,
        kind: kind.into(),
        payload: json.into(),
        created_at: String::new(),
    };
    match probe.decode() {
        Decoded::Known(p) => p,
        other => panic!("{kind} does not decode: {other:?}"),
    }
}

/// Three sessions with what a laptop's history holds: answers, a compaction, an
/// interrupted answer and a failed turn; a rewind (an edit) in an archived session; a tool
/// call asked about, allowed and run.
fn laptop_history(store: &Store) -> Vec<SessionId> {
    let new = |title: &str| {
        store
            .create_session(Some(title.into()), "You are terse.".into())
            .unwrap()
            .id
    };
    let compacted = new("compacted");
    for p in [
        user("alpha bravo"),
        answer(1, 1, "alpha answered"),
        user("charlie delta"),
        answer(2, 1, "delta answered"),
        compaction("they spoke of alpha and delta", 5),
        user("echo foxtrot"),
        pending(3, 1, "a partial echo"),
        user("golf alpha"),
        failed(4, 1, "stopped"),
    ] {
        store.append(compacted, &p).unwrap();
    }
    let edited = new("edited");
    for p in [
        user("first hotel"),
        answer(1, 1, "hotel answered"),
        user("second india"),
        answer(2, 1, "india answered"),
    ] {
        store.append(edited, &p).unwrap();
    }
    store
        .write(|w| w.edit(edited, 4, "second juliet alpha"))
        .unwrap();
    store
        .append(edited, &answer(2, 1, "juliet answered"))
        .unwrap();
    store.append(edited, &archived(true)).unwrap();
    let tooled = new("tooled");
    store.append(tooled, &user("list files alpha")).unwrap();
    for (kind, json) in [
        (
            "permission_requested",
            r#"{"turn":1,"attempt":1,"call_id":"c1","name":"shell","args":"{\"cmd\": \"ls\"}"}"#,
        ),
        (
            "permission_resolved",
            r#"{"call_id":"c1","decision":"allow","by":"user","remember":false}"#,
        ),
        (
            "tool_execution",
            r#"{"turn":1,"attempt":1,"step":1,"call_id":"c1","name":"shell","server":"builtin","args":"{\"cmd\": \"ls\"}","status":"ok","result_digest":{"bytes":5,"sha256":"ab","preview":"kilo.txt"},"duration_ms":4}"#,
        ),
    ] {
        store.append(tooled, &known(kind, json)).unwrap();
    }
    store
        // Not `kilo.txt`: file names are one token on PostgreSQL, so `kilo` would find it
        // on SQLite only (a documented difference of the tokenizers, store/pg/list.rs).
        .append(tooled, &answer(1, 1, "there is one file, kilo"))
        .unwrap();
    vec![compacted, edited, tooled]
}

/// `brain --db FROM sessions export --all | brain sessions import - --db TO`.
fn export_into(from: &str, to: &str) {
    let brain = env!("CARGO_BIN_EXE_brain");
    let mut export = Command::new(brain)
        .args(["--db", from, "sessions", "export", "--all"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the export");
    let piped = export.stdout.take().expect("export's stdout");
    let import = Command::new(brain)
        .args(["sessions", "import", "-", "--db", to])
        .stdin(Stdio::from(piped))
        .output()
        .expect("run the import");
    assert!(export.wait().unwrap().success(), "the export failed");
    assert!(
        import.status.success(),
        "{}",
        String::from_utf8_lossy(&import.stderr)
    );
}

/// The (session, seq, kind) of each hit for `q` (snippets may place their cuts apart).
fn hits(b: &Brain, q: &str) -> BTreeSet<(String, u64, String)> {
    let (status, found) = call(b, "GET", &format!("/v1/search?{q}"), None);
    assert_eq!(status, 200, "{found}");
    found["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["session_id"].as_str().unwrap().to_owned(),
                h["seq"].as_u64().unwrap(),
                h["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_laptop_history_moved_to_postgres_reads_back_the_same() {
    let Some(pg) = testdb::fresh("a_laptop_history_moved_to_postgres") else {
        return;
    };
    let mock = MockLlm::start(&[]);
    let laptop = TempDb::new();
    let ids = laptop_history(&laptop.open());
    export_into(&laptop.path().to_string_lossy(), &pg.url);
    let here = serve_on(&laptop.path().to_string_lossy(), &mock);
    let team = serve_on(&pg.url, &mock);
    let both = |path: &str| -> (Value, Value) {
        let (a, b) = (
            call(&here, "GET", path, None),
            call(&team, "GET", path, None),
        );
        assert_eq!((a.0, b.0), (200, 200), "{path}: {a:?} {b:?}");
        (a.1, b.1)
    };
    let mut kinds = BTreeSet::new();
    for id in &ids {
        let (a, b) = both(&format!("/v1/sessions/{id}"));
        let items = a["items"].as_array().expect("items");
        kinds.extend(
            items
                .iter()
                .filter_map(|i| i["kind"].as_str().map(str::to_owned)),
        );
        assert_eq!(a, b, "the transcript of {id}");
        let (a, b) = both(&format!("/v1/sessions/{id}/context"));
        assert!(
            a["messages"].as_array().is_some_and(|m| !m.is_empty()),
            "{a}"
        );
        assert_eq!(a, b, "the context of {id}");
    }
    for kind in [
        "compaction",
        "interrupted",
        "error",
        "rewind",
        "permission",
        "tool",
    ] {
        assert!(kinds.contains(kind), "no {kind} item in {kinds:?}");
    }
    let (a, b) = both("/v1/sessions?archived=include");
    assert_eq!(a["sessions"].as_array().map(Vec::len), Some(3), "{a}");
    assert_eq!(a, b, "the list");
    for q in [
        "q=alpha",
        "q=kilo",
        "q=juliet+alpha",
        "q=india",
        "q=delta&limit=100",
        "q=alpha+OR+kilo&syntax=fts",
        "q=%22second+juliet%22&syntax=fts",
    ] {
        let found = hits(&here, q);
        assert!(!found.is_empty(), "{q} finds something");
        assert_eq!(found, hits(&team, q), "search {q}");
    }
    // What the compaction replaced, the edit rewound and the tool did is all there.
    let (a, _) = both("/v1/sessions?archived=include&query=edited");
    assert_eq!(a["sessions"][0]["archived"], true, "{a}");
}
