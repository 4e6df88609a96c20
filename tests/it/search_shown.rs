//! What a search shows, through the real binary and over real HTTP (issue 34 item 10):
//! `brain sessions search` (highlights marked `⟦…⟧` in a pipe, `--stem`, a fork's copies
//! listed once) and `GET /v1/search` (`stem`, `also_in`, `C++`).

use std::process::Command;

use serde_json::{Value, json};

use crate::server::{Brain, call};
use crate::support::*;

/// A markdown session and its fork through the answer: ids of the source and the fork.
fn forked(db: &TempDb) -> (String, String) {
    let store = db.open();
    let source = store
        .create_session(Some("trip".into()), "sys".into())
        .unwrap()
        .id;
    store
        .append(source, &user("**Hostels** in Porto, and C++ books"))
        .unwrap();
    store
        .append(source, &answer(2, 1, "C is fine too; the `hostel` list"))
        .unwrap();
    let fork = store
        .write(|w| w.fork(source, Some(3), None, u64::MAX))
        .unwrap()
        .id;
    (source.to_string(), fork.to_string())
}

fn search_cli(db: &TempDb, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(db.path())
        .args(["sessions", "search"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_cli_marks_highlights_plainly_stems_on_request_and_lists_forks_once() {
    let db = TempDb::new();
    let (source, fork) = forked(&db);
    let text = search_cli(&db, &["hostels"]);
    // Not a terminal: `⟦…⟧`, no escape codes, and the message's own `**` is gone.
    assert!(text.contains("⟦Hostels⟧ in Porto"), "{text}");
    assert!(!text.contains("**") && !text.contains('\x1b'), "{text}");
    assert_eq!(text.matches(&format!("{source}  #2")).count(), 1, "{text}");
    assert!(!text.contains(&format!("{fork}  #")), "{text}");
    assert!(
        text.contains(&format!("    also in {fork}  trip (fork)")),
        "{text}"
    );
    // Unstemmed, `hostel` is the answer's word only; stemmed, the plural too.
    let plain = search_cli(&db, &["hostel"]);
    assert!(!plain.contains("#2 "), "{plain}");
    let stemmed = search_cli(&db, &["hostel", "--stem"]);
    assert!(
        stemmed.contains("#2 ") && stemmed.contains("#3 "),
        "{stemmed}"
    );
    assert!(stemmed.contains("⟦Hostels⟧"), "{stemmed}");
}

#[test]
fn the_api_answers_stem_also_in_and_words_with_symbols() {
    let db = TempDb::new();
    let (source, fork) = forked(&db);
    let mock = MockLlm::start(&[]);
    let b = Brain::start(&db, &mock.url, &[]);
    let (status, hits) = call(&b, "GET", "/v1/search?q=hostel&stem=true", None);
    assert_eq!(status, 200, "{hits}");
    let hits = hits["hits"].as_array().unwrap().clone();
    assert_eq!(hits.len(), 2, "{hits:?}");
    for h in &hits {
        // The fields every client reads are all still there.
        for field in [
            "session_id",
            "title",
            "seq",
            "kind",
            "label",
            "snippet",
            "highlights",
        ] {
            assert!(h.get(field).is_some(), "{field} in {h}");
        }
        assert_eq!(h["session_id"], json!(source));
        assert_eq!(
            h["also_in"],
            json!([{"session_id": fork, "title": "trip (fork)", "abandoned": false}])
        );
        assert!(!h["snippet"].as_str().unwrap().contains(['*', '`']), "{h}");
    }
    let (_, plain) = call(&b, "GET", "/v1/search?q=hostel", None);
    assert_eq!(plain["hits"].as_array().unwrap().len(), 1, "{plain}");
    let (_, cpp) = call(&b, "GET", "/v1/search?q=C%2B%2B", None);
    let cpp: Vec<&Value> = cpp["hits"].as_array().unwrap().iter().collect();
    assert_eq!(cpp.len(), 1, "{cpp:?}");
    assert_eq!(cpp[0]["seq"], 2);
    let snippet: Vec<char> = cpp[0]["snippet"].as_str().unwrap().chars().collect();
    let r = &cpp[0]["highlights"][0];
    let (s, e) = (
        r[0].as_u64().unwrap() as usize,
        r[1].as_u64().unwrap() as usize,
    );
    assert_eq!(snippet[s..e].iter().collect::<String>(), "C++");
    let (status, bad) = call(&b, "GET", "/v1/search?q=a&stem=yes", None);
    assert_eq!(
        (status, &bad["error"]),
        (400, &json!("bad_request")),
        "{bad}"
    );
}
