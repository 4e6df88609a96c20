//! Importing through the running server (issue 34, item 8): `POST /v1/import` over real
//! HTTP against a real `brain serve` process (JSON and a .zip of it, progress lines, a
//! truncated file, a zip bomb, a body over the limit, a second import while one runs, a
//! bad `from`), and `brain sessions import` sending its file to that server.

use std::io::{Cursor, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::import::{fixture, ok};
use crate::server::agent;
use crate::support::*;

/// `brain serve` on a fresh database (with `extra` flags); killed on drop.
struct Server {
    child: std::process::Child,
    url: String,
    db: TempDb,
    _mock: MockLlm,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let mock = MockLlm::start(&[]);
        let db = TempDb::new();
        let mut cmd = serve_command(&db, &mock.url);
        cmd.args(extra);
        let (child, url) = spawn_serve(&mut cmd);
        Server {
            child,
            url,
            db,
            _mock: mock,
        }
    }

    /// `POST /v1/import{query}` with `body`: the status and the body's text.
    fn import(&self, query: &str, body: &[u8], accept: &str) -> (u16, String) {
        let resp = agent()
            .post(&format!("{}/v1/import{query}", self.url))
            .header("Accept", accept)
            .send(body)
            .expect("the server answers");
        let status = resp.status().as_u16();
        (
            status,
            resp.into_body().read_to_string().unwrap_or_default(),
        )
    }

    fn json(&self, query: &str, body: &[u8]) -> (u16, Value) {
        let (status, text) = self.import(query, body, "application/json");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Imports `body` again: its two conversations are already here.
    fn imports_unchanged(&self, query: &str, body: &[u8]) {
        let (status, v) = self.json(query, body);
        assert_eq!(
            (status, &v["report"]["unchanged"]),
            (200, &Value::from(2)),
            "{v}"
        );
    }

    fn titles(&self) -> Vec<String> {
        let resp = agent()
            .get(&format!("{}/v1/sessions", self.url))
            .call()
            .unwrap();
        let v: Value = serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap();
        let mut t: Vec<String> = v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["title"].as_str().unwrap_or("").to_owned())
            .collect();
        t.sort();
        t
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A zip of `entries`, deflated, built with the zip crate's writer.
pub fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in entries {
        out.start_file(*name, options).unwrap();
        out.write_all(bytes).unwrap();
    }
    out.finish().unwrap().into_inner()
}

/// ChatGPT's export as it is sent: a zip with `conversations.json` beside other files.
pub fn chatgpt_zip() -> Vec<u8> {
    let json = std::fs::read(fixture("chatgpt.json")).unwrap();
    zip_of(&[
        ("chat.html", b"<html></html>"),
        ("user.json", b"{}"),
        ("conversations.json", &json),
    ])
}

const CHATGPT_TITLES: [&str; 2] = ["Branches & tools ☕", "Only pictures, no times"];

#[test]
fn a_chatgpt_export_is_imported_over_http_and_again_changes_nothing() {
    let s = Server::start(&[]);
    let json = std::fs::read(fixture("chatgpt.json")).unwrap();
    let (status, body) = s.json("", &json);
    assert_eq!(status, 200, "{body}");
    let r = &body["report"];
    assert_eq!(
        (&r["source"], &r["created"], &r["messages"]),
        (&Value::from("chatgpt"), &Value::from(2), &Value::from(10)),
        "{body}"
    );
    assert_eq!(s.titles(), CHATGPT_TITLES);
    s.imports_unchanged("?from=chatgpt", &json);
}

#[test]
fn a_zip_is_read_for_its_conversations_json_with_progress_lines() {
    let s = Server::start(&[]);
    let (status, text) = s.import("", &chatgpt_zip(), "application/x-ndjson");
    assert_eq!(status, 200, "{text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines[0]["progress"]["conversations"].as_u64() >= Some(1),
        "{text}"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["report"]["created"], 2, "{text}");
    assert_eq!(s.titles(), CHATGPT_TITLES);

    // Claude's, its file in a folder, named whatever: told by its bytes.
    let claude = std::fs::read(fixture("claude.json")).unwrap();
    let zip = zip_of(&[
        ("export/conversations.json", &claude),
        ("users.json", b"[]"),
    ]);
    let (status, body) = s.json("", &zip);
    assert_eq!(
        (status, &body["report"]["source"]),
        (200, &Value::from("claude"))
    );
}

#[test]
fn a_truncated_file_says_so_and_imports_nothing() {
    let s = Server::start(&[]);
    let text = std::fs::read_to_string(fixture("chatgpt.json")).unwrap();
    let cut = &text[..text.find("Only pictures").unwrap() + 40];
    let (status, body) = s.json("", cut.as_bytes());
    assert_eq!((status, body["error"].as_str()), (422, Some("bad_import")));
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("the file is truncated (it ends in the middle of this conversation")
            && message.contains("nothing was imported"),
        "{message}"
    );
    assert!(s.titles().is_empty());
    // Cut inside a zip's conversations.json: the same.
    let zip = zip_of(&[("conversations.json", cut.as_bytes())]);
    let (status, body) = s.json("", &zip);
    assert_eq!(status, 422, "{body}");
    assert!(body["message"].as_str().unwrap().contains("truncated"));
}

#[test]
fn hostile_zips_get_clear_errors() {
    let s = Server::start(&["--max-import-bytes", "100000"]);
    // A zip bomb: a few kilobytes that would be megabytes of JSON.
    let mut bomb = b"[".to_vec();
    bomb.resize(5_000_000, b' ');
    let zip = zip_of(&[("conversations.json", &bomb)]);
    assert!(zip.len() < 100_000, "{}", zip.len());
    let (status, body) = s.json("", &zip);
    assert_eq!(
        (status, body["error"].as_str()),
        (413, Some("too_large")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("over 100000 bytes uncompressed")
    );
    // No conversations.json: what is inside, escaped, traversal names and all.
    let zip = zip_of(&[("../../etc/passwd", b"x"), ("notes.txt", b"y")]);
    let (status, body) = s.json("", &zip);
    assert_eq!(status, 422, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("no conversations.json") && message.contains("\"../../etc/passwd\""),
        "{message}"
    );
    // A zip of something else under the right name.
    let zip = zip_of(&[("conversations.json", b"hello")]);
    let (status, body) = s.json("", &zip);
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cannot tell which tool")
    );
    // Two entries named conversations.json (the writer refuses one: renamed in the bytes):
    // refused, rather than the later one read in place of the one a person sees first.
    let mut zip = zip_of(&[("conversations.json", b"[]"), ("conversationX.json", b"[]")]);
    let from = b"conversationX.json";
    while let Some(i) = zip.windows(from.len()).position(|w| w == from) {
        zip[i..i + from.len()].copy_from_slice(b"conversations.json");
    }
    let (status, body) = s.json("", &zip);
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("appears twice"),
        "{body}"
    );
    // Bytes that only begin like a zip.
    let (status, body) = s.json("", b"PK\x03\x04 and then nothing of a zip");
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cannot be read as one")
    );
    assert!(s.titles().is_empty());
}

/// Writes a request head (and `body`) on a raw connection and reads the answer's status
/// line and body, within a deadline.
fn raw(url: &str, head: &str, body: &[u8]) -> (TcpStream, String) {
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    (c, addr.to_owned())
}

fn answer_of(c: &mut TcpStream) -> String {
    let mut text = Vec::new();
    let _ = c.read_to_end(&mut text);
    String::from_utf8_lossy(&text).into_owned()
}

#[test]
fn a_body_over_the_limit_is_413_before_it_is_sent_and_a_second_import_is_409() {
    let s = Server::start(&["--max-import-bytes", "100000"]);
    let host = s.url.trim_start_matches("http://").trim_end_matches('/');
    // The head alone: the answer comes without a byte of the body.
    let head =
        format!("POST /v1/import HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100001\r\n\r\n");
    let (mut c, _) = raw(&s.url, &head, b"");
    let text = answer_of(&mut c);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("--max-import-bytes"), "{text}");
    // Chunked, so its size is unknown: refused, not read.
    let head =
        format!("POST /v1/import HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n");
    let (mut c, _) = raw(&s.url, &head, b"");
    assert!(answer_of(&mut c).starts_with("HTTP/1.1 411"));

    // One import under way (half its body sent): a second is 409 at once.
    let json = std::fs::read(fixture("claude.json")).unwrap();
    let head = format!(
        "POST /v1/import HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n",
        json.len()
    );
    let (mut first, _) = raw(&s.url, &head, &json[..json.len() / 2]);
    // A probe that would be refused anyway (a bad `from`) takes no gate itself.
    wait_for(
        "the first import holds the gate",
        Duration::from_secs(10),
        || s.json("?from=word", b"[]").0 == 409,
    );
    let (status, body) = s.json("", &json);
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("import_running"))
    );
    first.write_all(&json[json.len() / 2..]).unwrap();
    let text = answer_of(&mut first);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // And the gate opens again.
    s.imports_unchanged("", &json);
}

#[test]
fn a_bad_from_is_400_and_a_wrong_one_says_what_the_file_is() {
    let s = Server::start(&[]);
    let json = std::fs::read(fixture("chatgpt.json")).unwrap();
    let (status, body) = s.json("?from=word", &json);
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));
    let (status, body) = s.json("?from=claude", &json);
    assert_eq!(status, 422, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("looks like a ChatGPT export") && message.contains("try from=chatgpt"),
        "{message}"
    );
    let (status, body) = s.json("", b"");
    assert_eq!(status, 400, "{body}");
    // A cross-site page cannot post an import (the guards every route has).
    let resp = agent()
        .post(&format!("{}/v1/import", s.url))
        .header("Origin", "http://evil.example")
        .send(&json[..])
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    assert!(s.titles().is_empty());
}

#[test]
fn sessions_import_sends_its_file_to_the_server_holding_the_database() {
    let s = Server::start(&["--api-token", "sesame"]);
    let zip_path = s.db.dir.path().join("export.zip");
    std::fs::write(&zip_path, chatgpt_zip()).unwrap();
    let file = zip_path.to_str().unwrap();
    // The server wants its token: without it, a clear refusal.
    let out = run_brain_on(&s.db, &["sessions", "import", file], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&s.url) && err.contains("bearer token"),
        "{err}"
    );
    let out = run_brain_on(
        &s.db,
        &["sessions", "import", file, "--api-token", "sesame"],
        b"",
    );
    let report = ok(&out);
    assert!(
        report.contains("imported 2 conversations from chatgpt: 2 created")
            && report.contains("10 messages"),
        "{report}"
    );
    let resp = agent()
        .get(&format!("{}/v1/sessions", s.url))
        .header("Authorization", "Bearer sesame")
        .call()
        .unwrap();
    let v: Value = serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 2, "{v}");
    // Refusals come back as the server words them.
    let bad = s.db.dir.path().join("bad.json");
    std::fs::write(&bad, b"hello").unwrap();
    let out = run_brain_on(
        &s.db,
        &[
            "sessions",
            "import",
            bad.to_str().unwrap(),
            "--api-token",
            "sesame",
        ],
        b"",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot tell which tool"), "{err}");
}

/// llm's `logs.db` (a SQLite file, read from the temporary file the body went to) and
/// brain's own JSONL export are imported over HTTP too.
#[test]
fn a_logs_db_and_a_brain_export_are_imported_over_http() {
    let s = Server::start(&[]);
    let path = s.db.dir.path().join("logs.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(crate::import_llm::LEGACY_SCHEMA)
        .unwrap();
    conn.execute_batch(
        r#"
        INSERT INTO conversations VALUES ('01hx', 'Bread', 'gpt-4o-mini');
        INSERT INTO responses VALUES ('r1', 'gpt-4o-mini', 'How long to proof?', 'You bake.',
          'About an hour.', '01hx', '2024-05-06T12:00:00');
        "#,
    )
    .unwrap();
    drop(conn);
    let (status, body) = s.json("", &std::fs::read(&path).unwrap());
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["report"]["source"], &body["report"]["created"]),
        (&Value::from("llm"), &Value::from(1))
    );
    // A zip holding a database under the export's name is refused, not unpacked to disk.
    let zip = zip_of(&[("conversations.json", &std::fs::read(&path).unwrap())]);
    let (status, body) = s.json("", &zip);
    assert_eq!(status, 422, "{body}");
    assert!(body["message"].as_str().unwrap().contains("unzip it"));

    // brain's JSONL, as `sessions export` writes it, from another database.
    let other = TempDb::new();
    let id = other
        .open()
        .create_session(Some("Moved".into()), "sys".into())
        .unwrap()
        .id;
    let jsonl = crate::import::export(&other);
    let (status, body) = s.json("?from=brain", &jsonl);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["report"]["source"], &body["report"]["created"]),
        (&Value::from("brain"), &Value::from(1))
    );
    assert!(s.titles().contains(&"Moved".to_owned()), "{id}");
}

/// With no server, `sessions import` reads the zip itself; standard input cannot hold one
/// (a zip is read from its end), and says so.
#[test]
fn sessions_import_reads_a_zip_in_process_and_not_from_standard_input() {
    let db = TempDb::new();
    let path = db.dir.path().join("chatgpt-export");
    std::fs::write(&path, chatgpt_zip()).unwrap();
    let report = ok(&crate::import::import(&db, &path, &[]));
    assert!(
        report.contains("imported 2 conversations from chatgpt: 2 created"),
        "{report}"
    );
    let piped = crate::import::failed(&run_brain_on(
        &db,
        &["sessions", "import", "-"],
        &chatgpt_zip(),
    ));
    assert!(
        piped.contains("give its path, not standard input"),
        "{piped}"
    );
    let bare = zip_of(&[("notes.txt", b"hello")]);
    std::fs::write(&path, bare).unwrap();
    let err = crate::import::failed(&crate::import::import(&db, &path, &[]));
    assert!(
        err.contains("no conversations.json") && err.contains("\"notes.txt\""),
        "{err}"
    );
    assert_eq!(db.open().session_ids().unwrap().len(), 2);
}

/// An upload that stops arriving is 408 after the request timeout, and the gate opens for
/// the next import.
#[test]
fn a_stalled_upload_is_408_and_frees_the_gate() {
    let s = Server::start(&["--request-timeout", "1"]);
    let host = s.url.trim_start_matches("http://").trim_end_matches('/');
    let json = std::fs::read(fixture("claude.json")).unwrap();
    let head = format!(
        "POST /v1/import HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n",
        json.len()
    );
    let (mut stalled, _) = raw(&s.url, &head, &json[..10]);
    let text = answer_of(&mut stalled);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    let (status, body) = s.json("", &json);
    assert_eq!((status, &body["report"]["created"]), (200, &Value::from(2)));
}

/// The file is read on a thread of its own ahead of the writer: a reader that dies
/// midway (a panic) is a failed import that wrote nothing, never a file taken as ended.
#[test]
fn a_reader_that_dies_midway_imports_nothing() {
    use brain::import::chatgpt;
    let db = TempDb::new();
    let store = db.open();
    let json = std::fs::read(fixture("chatgpt.json")).unwrap();
    let mut first = chatgpt::read(&json[..]).take(1);
    let dying = std::iter::from_fn(move || match first.next() {
        Some(c) => Some(c),
        None => panic!("a reader dies (this panic is the test's)"),
    });
    let never = std::sync::atomic::AtomicBool::new(false);
    let err = brain::import::apply::import_conversations(&store, dying, &never, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("stopped before the end") && err.contains("nothing was imported"),
        "{err}"
    );
    assert!(store.session_ids().unwrap().is_empty());
    // The same reader, whole: imported.
    let report = brain::import::apply::import_conversations(
        &store,
        chatgpt::read(&json[..]),
        &never,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(report.created, 2);
}

/// A ChatGPT export of `n` small conversations (ten messages each).
fn many_conversations(n: usize) -> Vec<u8> {
    let all: Vec<Value> = (0..n)
        .map(|c| {
            let mut mapping = serde_json::Map::new();
            mapping.insert(
                "root".into(),
                serde_json::json!({"message": null, "parent": null, "children": ["m0"]}),
            );
            for i in 0..10 {
                let parent = if i == 0 { "root".to_owned() } else { format!("m{}", i - 1) };
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                mapping.insert(
                    format!("m{i}"),
                    serde_json::json!({"parent": parent, "children": [], "message": {
                        "author": {"role": role}, "create_time": 1.7e9 + (c * 100 + i) as f64,
                        "content": {"content_type": "text", "parts": [format!("words {i} ").repeat(30)]}}}),
                );
            }
            serde_json::json!({"id": format!("c{c}"), "title": format!("Conversation {c}"),
                "mapping": mapping, "current_node": "m9"})
        })
        .collect();
    serde_json::to_vec(&all).unwrap()
}

/// A shutdown stops a running import (rolled back) rather than waiting for its one
/// transaction: the server exits within its 10 s, and nothing of the file is kept.
#[test]
fn a_shutdown_stops_a_running_import_and_keeps_none_of_it() {
    let mut s = Server::start(&[]);
    let body = many_conversations(3000);
    let url = s.url.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let client = std::thread::spawn(move || {
        let resp = agent()
            .post(&format!("{url}/v1/import"))
            .header("Accept", "application/x-ndjson")
            .send(&body[..])
            .unwrap();
        let mut lines =
            std::io::BufRead::lines(std::io::BufReader::new(resp.into_body().into_reader()));
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        tx.send(first).unwrap();
        lines.map_while(Result::ok).last().unwrap_or_default()
    });
    let first = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(first.contains("\"progress\""), "{first}");
    let pid = s.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    wait_for("the server exits", Duration::from_secs(10), || {
        s.child.try_wait().unwrap().is_some()
    });
    assert!(std::time::Instant::now() <= deadline);
    let last = client.join().unwrap();
    // Told, not cut off: the import stopped at once and said why.
    assert!(last.contains("the server is shutting down"), "{last}");
    assert!(s.db.open().session_ids().unwrap().is_empty());
}
