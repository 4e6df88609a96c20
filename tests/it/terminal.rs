//! The terminal: `brain chat` through a pipe (against a server, and in-process), Ctrl-C,
//! export and import round trips and their edges, backups taken while appends go on, the
//! database's lock (servers, writers, in-process chat), and escape sequences in text.
//! Every wait is on a condition (a line of output, a channel), never on a sleep.

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use brain::session::events::TitledBy;
use brain::session::projection::{llm_context, ui_transcript};
use brain::session::store::{SearchQuery, Syntax};
use brain::session::{Store, StoreOptions};

use crate::support::*;

fn brain(db: &TempDb, args: &[&str], stdin: &str) -> Output {
    run_brain_on(db, args, stdin.as_bytes())
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn serve(db: &TempDb, provider: &str) -> (Child, String) {
    spawn_serve(&mut serve_command(db, provider))
}

#[test]
fn chat_through_a_pipe_against_the_server_then_resumed() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let (mut server, url) = serve(&db, &mock.url);
    // No --url: the server holding the database is found through its lock file.
    let first = ok(&brain(&db, &["chat"], "hello there\nsecond question\n"));
    assert!(first.contains(&format!("(server {url})")), "{first}");
    assert!(
        first.contains("mock answer") && first.contains("to: hello there"),
        "{first}"
    );
    assert!(first.contains("to: second question"), "{first}");
    // Through a pipe each line read is shown after the prompt, and a blank line ends each
    // answer: the output reads as the conversation.
    assert!(
        first.contains("\nyou › hello there\n[new session ")
            && first.contains("]\nassistant: ")
            && first.contains("\n\nyou › second question\n"),
        "{first}"
    );
    let id = crate::support::chat_session(&first);

    let second = ok(&brain(
        &db,
        &["chat", "--url", &url, "--session", &id],
        "third one\n/retry\n",
    ));
    assert!(
        second.contains("you › hello there") && second.contains("you › second question"),
        "history: {second}"
    );
    assert!(second.contains("to: third one"), "{second}");
    let requests: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r["stream"] == true)
        .collect();
    assert_eq!(requests.len(), 4, "three turns and a retry");
    assert_eq!(
        requests[3]["messages"], requests[2]["messages"],
        "the retry resent the request"
    );

    // Commands that write refuse while the server holds the database; an import goes to
    // it instead (and an empty file is its refusal).
    let refused = brain(&db, &["migrate"], "");
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("holds"));
    let sent = brain(&db, &["sessions", "import", "/dev/null"], "");
    assert_eq!(sent.status.code(), Some(1));
    let err = String::from_utf8_lossy(&sent.stderr);
    assert!(
        err.contains(&format!("the server at {url}")) && err.contains("body is empty"),
        "{err}"
    );
    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn chat_runs_the_engine_in_process_when_no_server_holds_the_database() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let out = ok(&brain(
        &db,
        &["chat", "--provider-url", &mock.url],
        "one\ntwo\n",
    ));
    assert!(out.contains("in-process"), "{out}");
    assert!(out.contains("to: one") && out.contains("to: two"), "{out}");
    let store = db.open();
    let id = store.session_ids().unwrap()[0];
    // Turn memory and titles arrive in the background, in any order: only the turns count.
    let kinds: Vec<String> = store
        .events(id, 1, None)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .filter(|k| k == "user_message" || k == "assistant_turn")
        .collect();
    assert_eq!(
        &kinds[..4],
        [
            "user_message",
            "assistant_turn",
            "user_message",
            "assistant_turn"
        ]
    );
}

/// A database with a bit of everything, unknown kinds and bad payloads included.
fn varied(db: &TempDb) -> Store {
    let store = db.open();
    for n in 0..3 {
        let id = store
            .create_session(Some(format!("Session {n}")), format!("system {n}"))
            .unwrap()
            .id;
        let u = store
            .append(id, &user(&format!("question about herons {n}")))
            .unwrap()
            .seq;
        store.append(id, &pending(u, 1, "half an ans")).unwrap();
        store
            .append(id, &answer(u, 2, &format!("answer about herons {n}")))
            .unwrap();
        let u2 = store
            .append(
                id,
                &user("a follow-up with ünïcödé and \"quotes\"\nand lines"),
            )
            .unwrap()
            .seq;
        store
            .append(id, &failed(u2, 1, "provider_unreachable"))
            .unwrap();
        store
            .append(id, &compaction("summary of herons", u))
            .unwrap();
        store.append(id, &memory(u, 2)).unwrap();
        store
            .rename(id, format!("Renamed {n}"), TitledBy::User)
            .unwrap();
        if n == 1 {
            store.set_archived(id, true).unwrap();
        }
    }
    let id = store.session_ids().unwrap()[0];
    let conn = db.raw();
    conn.execute(
        "INSERT INTO session_events (session_n, seq, id, kind, payload, created_at)
         VALUES ((SELECT n FROM sessions WHERE id = ?1), 10, 9000, 'from_the_future', '{\"z\":1,  \"a\" : [true]}', '2030-01-01T00:00:00.000000Z'),
                ((SELECT n FROM sessions WHERE id = ?1), 11, 9001, 'user_message', '{\"txt\": 5}', '2030-01-01T00:00:01.000000Z')",
        [id.to_string()],
    )
    .unwrap();
    store
}

#[test]
fn export_then_import_gives_the_same_transcripts_contexts_and_search_results() {
    let src = TempDb::new();
    let store = varied(&src);
    let file = src.dir.path().join("export.jsonl");
    ok(&brain(
        &src,
        &[
            "sessions",
            "export",
            "--all",
            "--format",
            "jsonl",
            "--output",
            file.to_str().unwrap(),
        ],
        "",
    ));
    let dst = TempDb::new();
    let imported = ok(&brain(
        &dst,
        &["sessions", "import", file.to_str().unwrap()],
        "",
    ));
    assert!(imported.contains("imported 3 sessions"), "{imported}");
    let copy = dst.open();
    assert_eq!(copy.session_ids().unwrap(), store.session_ids().unwrap());
    for id in store.session_ids().unwrap() {
        let (a, b) = (
            store.events(id, 0, None).unwrap(),
            copy.events(id, 0, None).unwrap(),
        );
        assert_eq!(a, b, "every event byte for byte");
        assert_eq!(ui_transcript(&a, None), ui_transcript(&b, None));
        assert_eq!(
            llm_context(&store.events_for_context(id).unwrap()),
            llm_context(&copy.events_for_context(id).unwrap())
        );
        assert_eq!(
            store.session(id).unwrap(),
            copy.session(id).unwrap(),
            "the cache row"
        );
    }
    for q in ["herons", "summary", "Renamed", "ünïcödé"] {
        let query = SearchQuery {
            text: q.into(),
            syntax: Syntax::Plain,
            limit: 50,
            offset: 0,
            order: Default::default(),
            stem: false,
        };
        assert_eq!(
            store.search(&query).unwrap(),
            copy.search(&query).unwrap(),
            "{q}"
        );
    }
    // Importing again changes nothing (SPEC §15: imports are idempotent).
    let again = brain(&dst, &["sessions", "import", file.to_str().unwrap()], "");
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("0 created, 0 extended, 3 unchanged"),
        "{again:?}"
    );
    assert_eq!(
        copy.events(store.session_ids().unwrap()[0], 0, None)
            .unwrap()
            .len(),
        11
    );

    let id = store.session_ids().unwrap()[0].to_string();
    let md = ok(&brain(
        &src,
        &["sessions", "export", &id, "--format", "markdown"],
        "",
    ));
    for expected in [
        "# Renamed 0",
        "**You**",
        "question about herons 0",
        "interrupted",
        "Failed (provider_unreachable)",
        "summary of herons",
        "unreadable",
    ] {
        assert!(md.contains(expected), "{expected} missing from:\n{md}");
    }
}

#[test]
fn an_import_with_a_corrupt_line_reports_it_and_imports_nothing() {
    let src = TempDb::new();
    varied(&src);
    let out = ok(&brain(&src, &["sessions", "export", "--all"], ""));
    let mut lines: Vec<String> = out.lines().map(str::to_owned).collect();
    lines[12] = "{\"session_id\": \"nope\"".into();
    let file = src.dir.path().join("bad.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let dst = TempDb::new();
    let failed = brain(&dst, &["sessions", "import", file.to_str().unwrap()], "");
    assert_eq!(failed.status.code(), Some(1));
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(
        err.contains("line 13") && err.contains("nothing was imported"),
        "{err}"
    );
    assert!(dst.open().session_ids().unwrap().is_empty());
    // A gap in a session's seqs is refused the same way.
    let mut gapped: Vec<String> = out.lines().map(str::to_owned).collect();
    gapped.remove(3);
    std::fs::write(&file, gapped.join("\n")).unwrap();
    let failed = brain(&dst, &["sessions", "import", file.to_str().unwrap()], "");
    assert!(String::from_utf8_lossy(&failed.stderr).contains("out of order"));
    assert!(dst.open().session_ids().unwrap().is_empty());
}

#[test]
fn a_backup_taken_during_appends_opens_and_passes_the_integrity_check() {
    let db = TempDb::new();
    let store = Arc::new(db.open());
    let id = store.create_session(None, String::new()).unwrap().id;
    let stop = Arc::new(AtomicBool::new(false));
    let (under_way, appending) = std::sync::mpsc::channel();
    let writer = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                store
                    .append(id, &user(&format!("message {n} {}", "x".repeat(2000))))
                    .unwrap();
                n += 1;
                if n == 10 {
                    let _ = under_way.send(());
                }
            }
            n
        })
    };
    // Back up once the appends are under way (they go on meanwhile).
    appending
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the writer appends");
    let target = db.dir.path().join("copy.db");
    let out = ok(&brain(&db, &["backup", target.to_str().unwrap()], ""));
    stop.store(true, Ordering::SeqCst);
    let written = writer.join().unwrap();
    assert!(out.contains("integrity ok"), "{out}");
    assert!(written >= 10, "appends went on ({written})");
    let copy = Store::open(&target, StoreOptions::default()).unwrap();
    let seqs: Vec<u64> = copy
        .events(id, 0, None)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert!(seqs.len() > 1);
    assert_gapless(&seqs);
    let refused = brain(&db, &["backup", target.to_str().unwrap()], "");
    assert_eq!(
        refused.status.code(),
        Some(1),
        "an existing file is not overwritten"
    );
}

#[test]
fn ctrl_c_stops_the_answer_and_a_second_ctrl_c_leaves() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let (mut server, url) = serve(&db, &mock.url);
    let mut chat = Command::new(env!("CARGO_BIN_EXE_brain"))
        .args(["chat", "--url", &url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = chat.stdin.take().unwrap();
    stdin
        .write_all(b"wait forever [[mock {\"hang\": true}]]\n")
        .unwrap();
    stdin.flush().unwrap();
    let out = Stdout::of(&mut chat);
    let interrupt = |pid: u32| {
        Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap();
    };
    // `assistant: ` is printed once the server has accepted the turn and its first frame
    // arrived: the answer is under way. Then Ctrl-C.
    let seen = out.until("assistant: ");
    assert!(seen.starts_with("a new session "), "{seen}");
    interrupt(chat.id());
    // Stopped by the person: said so, not "failed" or "cut off".
    out.until("[stopped");
    // Still alive at the prompt; a second Ctrl-C leaves.
    assert!(chat.try_wait().unwrap().is_none());
    interrupt(chat.id());
    let status = chat.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    drop(stdin);
    server.kill().unwrap();
    server.wait().unwrap();
}

/// A child's standard output as it arrives (partial lines included), to wait on.
pub(crate) struct Stdout {
    chunks: std::sync::mpsc::Receiver<String>,
    seen: std::cell::RefCell<String>,
}

impl Stdout {
    pub(crate) fn of(child: &mut Child) -> Stdout {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut stdout, &mut buf) {
                if tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
                {
                    break;
                }
            }
        });
        Stdout {
            chunks: rx,
            seen: Default::default(),
        }
    }

    /// Waits (generously) until `text` follows `marker` in the output; returns all of it.
    pub(crate) fn until_after(&self, marker: &str, text: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let found = |s: &str| {
            s.find(marker)
                .is_some_and(|i| s[i + marker.len()..].contains(text))
        };
        let mut seen = self.seen.borrow_mut();
        while !found(&seen) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(chunk) => seen.push_str(&chunk),
                Err(_) => panic!("no {text:?} after {marker:?} in the output:\n{seen}"),
            }
        }
        seen.clone()
    }

    /// Waits (generously) until the output so far contains `text`; returns all of it.
    pub(crate) fn until(&self, text: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut seen = self.seen.borrow_mut();
        while !seen.contains(text) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(chunk) => seen.push_str(&chunk),
                Err(_) => panic!("no {text:?} in the output:\n{seen}"),
            }
        }
        seen.clone()
    }
}

fn lock_file(db: &TempDb) -> std::path::PathBuf {
    let mut p = db.path().into_os_string();
    p.push(".lock");
    p.into()
}

/// Starts a server that must be refused at once; one that starts instead is killed.
fn refused_serve(db: &TempDb, provider: &str) -> String {
    let child = Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(db.path())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--provider-url",
            provider,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            Command::new("kill").args(["-9", &pid]).status().unwrap();
            panic!("a second server started on a held database");
        }
    };
    assert_eq!(out.status.code(), Some(1), "the second server was refused");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_second_server_on_one_database_is_refused_naming_the_first() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let (mut first, url) = serve(&db, &mock.url);
    let err = refused_serve(&db, &mock.url);
    assert!(err.contains(&url) && err.contains("holds"), "{err}");
    server_stops(&mut first);
    assert!(
        !lock_file(&db).exists(),
        "a clean exit removes the lock file"
    );
}

fn server_stops(server: &mut Child) {
    Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(server.wait().unwrap().success());
}

#[test]
fn a_sigkilled_servers_lock_does_not_block_the_next_one() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let (mut first, _) = serve(&db, &mock.url);
    first.kill().unwrap(); // SIGKILL: the file stays, the kernel drops the lock
    first.wait().unwrap();
    assert!(lock_file(&db).exists());
    let (mut second, url) = serve(&db, &mock.url);
    let text = std::fs::read_to_string(lock_file(&db)).unwrap();
    assert!(text.starts_with(&url), "the new server's URL: {text:?}");
    server_stops(&mut second);
}

#[test]
fn a_lock_file_naming_a_live_unrelated_pid_is_ignored() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    drop(db.open());
    for pid in [1, std::process::id()] {
        // The old format: a URL nobody serves, and a pid that is alive.
        std::fs::write(lock_file(&db), format!("http://127.0.0.1:1\n{pid}\n")).unwrap();
        let out = ok(&brain(
            &db,
            &["chat", "--provider-url", &mock.url],
            "hello\n",
        ));
        assert!(
            out.contains("in-process") && out.contains("to: hello"),
            "{out}"
        );
        std::fs::write(lock_file(&db), format!("http://127.0.0.1:1\n{pid}\n")).unwrap();
        let (mut server, _) = serve(&db, &mock.url);
        server_stops(&mut server);
    }
}

#[test]
fn in_process_chat_holds_the_database_against_a_server_started_meanwhile() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let mut chat = Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(db.path())
        .args(["chat", "--provider-url", &mock.url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Stdout::of(&mut chat).until("in-process");
    let err = refused_serve(&db, &mock.url);
    assert!(
        err.contains(&format!("brain chat, pid {}", chat.id())),
        "{err}"
    );
    let migrate = brain(&db, &["migrate"], "");
    assert_eq!(migrate.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&migrate.stderr).contains("brain chat, pid"));
    // The chat leaves; the database is free again.
    drop(chat.stdin.take());
    assert!(chat.wait().unwrap().success());
    let (mut server, _) = serve(&db, &mock.url);
    server_stops(&mut server);
}

/// No byte that could drive a terminal: ESC, BEL, CR, C1 controls.
fn assert_inert(out: &str) {
    for bad in ['\x1b', '\x07', '\r', '\u{9b}', '\u{9d}'] {
        assert!(!out.contains(bad), "{bad:?} reached the terminal:\n{out:?}");
    }
}

#[test]
fn terminal_escapes_in_model_and_user_text_are_shown_not_obeyed() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    // Split into 9 chunks: the sequences straddle chunk boundaries.
    mock.script(serde_json::json!({
        "kind": "stream",
        "text": "look \x1b[2J\x1b]0;pwned\x07 and \u{9b}31m here\r",
        "chunks": 9
    }));
    let out = ok(&brain(
        &db,
        &["chat", "--provider-url", &mock.url],
        "hi \x1b[31mred\n",
    ));
    assert_inert(&out);
    assert!(
        out.contains("look ^[[2J^[]0;pwned^G and ^[[31m here"),
        "{out}"
    );
    let store = db.open();
    let id = store.session_ids().unwrap()[0];
    store
        .rename(id, "title \x1b]0;x\x1b\\".into(), TitledBy::User)
        .unwrap();
    drop(store);
    let sid = id.to_string();
    for args in [
        &["sessions", "show", &sid][..],
        &["sessions", "show", &sid, "--llm"],
        &["sessions", "show", &sid, "--events"],
        &["sessions", "list"],
        &["sessions", "search", "look"],
        &["sessions", "export", &sid, "--format", "markdown"],
    ] {
        let shown = ok(&brain(&db, args, ""));
        assert_inert(&shown);
        assert!(shown.contains("^["), "{args:?}: {shown}");
    }
    let resumed = ok(&brain(
        &db,
        &["chat", "--provider-url", &mock.url, "--session", &sid],
        "",
    ));
    assert_inert(&resumed);
    assert!(
        resumed.contains("you › hi ^[[31mred") && resumed.contains("^[]0;pwned^G"),
        "{resumed}"
    );
}

fn export_all(db: &TempDb) -> String {
    ok(&brain(db, &["sessions", "export", "--all"], ""))
}

fn import_file(db: &TempDb, name: &str, lines: &str) -> Output {
    let file = db.dir.path().join(name);
    std::fs::write(&file, lines).unwrap();
    brain(db, &["sessions", "import", file.to_str().unwrap()], "")
}

#[test]
fn export_keeps_a_pretty_printed_payload_byte_for_byte_on_one_line() {
    let src = TempDb::new();
    let store = src.open();
    let id = store.create_session(None, "sys".into()).unwrap().id;
    let pretty = "{\n  \"z\": 1,\n  \"a\": [true, \"x\\ny\"]\r\n}";
    src.raw()
        .execute(
            "INSERT INTO session_events (session_n, seq, id, kind, payload, created_at)
             VALUES ((SELECT n FROM sessions WHERE id = ?1), 2, 9000, 'from_the_future', ?2, '2030-01-01T00:00:00.000000Z')",
            rusqlite::params![id.to_string(), pretty],
        )
        .unwrap();
    let out = export_all(&src);
    assert_eq!(out.lines().count(), 2, "one event per line:\n{out}");
    for line in out.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
    let dst = TempDb::new();
    ok(&import_file(&dst, "e.jsonl", &out));
    let copy = dst.open();
    assert_eq!(copy.events(id, 0, None).unwrap()[1].payload, pretty);
    assert_eq!(
        copy.events(id, 0, None).unwrap(),
        store.events(id, 0, None).unwrap()
    );
}

#[test]
fn import_normalises_timestamps_and_refuses_what_is_not_one() {
    let src = TempDb::new();
    let store = src.open();
    let id = store.create_session(None, "sys".into()).unwrap().id;
    store.append(id, &user("hello")).unwrap();
    drop(store);
    let out = export_all(&src);
    let mut lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines[0]["created_at"] = "2026-11-30T06:17:26.5+02:00".into();
    lines[1]["created_at"] = "2026-11-30T04:17:27Z".into();
    let text = |lines: &[serde_json::Value]| {
        lines
            .iter()
            .map(|l| l.to_string() + "\n")
            .collect::<String>()
    };
    let dst = TempDb::new();
    ok(&import_file(&dst, "ts.jsonl", &text(&lines)));
    let events = dst.open().events(id, 0, None).unwrap();
    assert_eq!(events[0].created_at, "2026-11-30T04:17:26.500000Z");
    assert_eq!(events[1].created_at, "2026-11-30T04:17:27.000000Z");
    let row = dst.open().session(id).unwrap();
    assert_eq!(row.created_at, "2026-11-30T04:17:26.500000Z");

    lines[1]["created_at"] = "yesterday".into();
    let other = TempDb::new();
    let refused = import_file(&other, "bad.jsonl", &text(&lines));
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("line 2") && err.contains("\"yesterday\" is not an RFC 3339 timestamp"),
        "{err}"
    );
    assert!(other.open().session_ids().unwrap().is_empty());
}

#[test]
fn import_refusals_name_the_line_and_blame_the_file() {
    let src = TempDb::new();
    varied(&src);
    let out = export_all(&src);
    let mut lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The second session's first line, made into something else.
    let at = lines
        .iter()
        .position(|l| l["seq"] == 1 && l != &lines[0])
        .unwrap();
    lines[at]["kind"] = "user_message".into();
    let text: String = lines.iter().map(|l| l.to_string() + "\n").collect();
    let dst = TempDb::new();
    let refused = import_file(&dst, "bad.jsonl", &text);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(&format!("line {}", at + 1)) && err.contains("not session_started"),
        "{err}"
    );
    assert!(!err.contains("the database holds"), "{err}");

    // Importing a file twice changes nothing; a file whose session differs from the one
    // here is refused, naming the line of that session.
    ok(&import_file(&dst, "good.jsonl", &out));
    ok(&import_file(&dst, "good.jsonl", &out));
    let mut edited: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(edited[1]["seq"], 2, "the first session's second event");
    edited[1]["created_at"] = "2001-01-01T00:00:00.000000Z".into();
    let changed: String = edited.iter().map(|l| l.to_string() + "\n").collect();
    let again = import_file(&dst, "changed.jsonl", &changed);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("line 1 ") && err.contains("already in this database with different events"),
        "{err}"
    );
    let missing = brain(&dst, &["sessions", "import", "/nonexistent/x.jsonl"], "");
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("cannot read /nonexistent/x.jsonl"), "{err}");
}

#[test]
fn export_output_refuses_an_existing_file_and_always_the_database() {
    let db = TempDb::new();
    varied(&db);
    let before = std::fs::read(db.path()).unwrap();
    let existing = db.dir.path().join("existing.jsonl");
    std::fs::write(&existing, "keep me").unwrap();
    let export_to = |path: &std::path::Path, force: bool| {
        let mut args = vec![
            "sessions",
            "export",
            "--all",
            "--output",
            path.to_str().unwrap(),
        ];
        if force {
            args.push("--force");
        }
        brain(&db, &args, "")
    };
    let refused = export_to(&existing, false);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
    ok(&export_to(&existing, true));
    assert!(
        std::fs::read_to_string(&existing)
            .unwrap()
            .contains("session_started")
    );

    let link = db.dir.path().join("link.db");
    std::os::unix::fs::symlink(db.path(), &link).unwrap();
    let dotted = db.dir.path().join("sub").join("..").join("brain.db");
    std::fs::create_dir(db.dir.path().join("sub")).unwrap();
    let mut companions = vec![db.path(), link, dotted];
    for suffix in ["-wal", "-shm", ".lock"] {
        let mut p = db.path().into_os_string();
        p.push(suffix);
        companions.push(p.into());
    }
    for path in companions {
        for force in [false, true] {
            let refused = export_to(&path, force);
            assert_eq!(refused.status.code(), Some(1), "{path:?}");
            let err = String::from_utf8_lossy(&refused.stderr);
            assert!(err.contains("the database"), "{path:?}: {err}");
        }
    }
    assert_eq!(std::fs::read(db.path()).unwrap(), before);
}

/// A newer export of a session that grew adds only what is new (SPEC §15), and the
/// result exports exactly like the source.
#[test]
fn importing_a_grown_export_appends_only_the_new_events() {
    let src = TempDb::new();
    let store = src.open();
    let id = store
        .create_session(Some("grows".into()), "sys".into())
        .unwrap()
        .id;
    store.append(id, &user("one")).unwrap();
    store.append(id, &answer(2, 1, "first")).unwrap();
    drop(store);
    let before = export_all(&src);
    let dst = TempDb::new();
    ok(&import_file(&dst, "before.jsonl", &before));
    let store = src.open();
    store.append(id, &user("two")).unwrap();
    store.append(id, &answer(4, 1, "second")).unwrap();
    drop(store);
    let after = export_all(&src);
    let report = ok(&import_file(&dst, "after.jsonl", &after));
    assert!(
        report.contains("(2 events): 0 created, 1 extended, 0 unchanged"),
        "{report}"
    );
    assert_eq!(export_all(&dst), after);
}

/// Issue 34 item 3: a command other than `serve` prints what was asked for, not the
/// migrations it applied (they went to stderr at INFO before).
#[test]
fn cli_commands_print_no_log_lines_at_the_default_level() {
    let db = TempDb::new();
    let out = brain(&db, &["migrate"], "");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.is_empty(), "log lines on stderr: {err}");
}
