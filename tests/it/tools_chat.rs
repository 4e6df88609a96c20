//! `brain chat` with tools (SPEC §10, §13), through a pipe: calls are shown inline with
//! their status and time, and a question is asked on the terminal — `y` allows, `a` allows
//! for the session, `n`, anything else or the end of input denies — against a server and
//! in-process, with the real server-filesystem doing the writing.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::mcp::npm_server;
use crate::support::*;
use crate::tools_loop::{start, write_call};

fn chat(args: &[&str], stdin: &str) -> String {
    let out = run_brain(args, stdin.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// One scripted turn: a step asking to write `file`, then one that says it is done.
fn write_turn(mock: &MockLlm, call_id: &str, file: &Path) {
    mock.script(json!([
        {"kind": "stream", "text": "Writing.", "tool_calls": [write_call(call_id, file, "from the terminal")]},
        {"kind": "stream", "text": "Done."},
    ]));
}

#[test]
fn chat_against_a_server_asks_and_yes_no_and_the_end_of_input_answer() {
    let test = "tools_chat::chat_against_a_server_asks_and_yes_no_and_the_end_of_input_answer";
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = start(test, &mock, dir.path(), &[]) else {
        return;
    };
    let yes = dir.path().join("yes.txt");
    write_turn(&mock, "call_yes", &yes);
    let out = chat(&["chat", "--url", &b.url], "write it\ny\n");
    assert!(
        out.contains("\n[tool fs__write_file {\"content\":\"from the terminal\",\"path\":\"/"),
        "the call inline: {out}"
    );
    assert!(
        out.contains("\nAllow fs__write_file({\"content\":")
            && out.contains("? [y]es / [n]o / [a]lways y\n"),
        "the question, and the answer read shown after it: {out}"
    );
    assert!(out.contains("[ok, ") && out.contains(" ms]"), "{out}");
    assert!(out.contains("Done."), "{out}");
    assert_eq!(std::fs::read_to_string(&yes).unwrap(), "from the terminal");
    let id = crate::support::chat_session(&out);

    let no = dir.path().join("no.txt");
    write_turn(&mock, "call_no", &no);
    let out = chat(&["chat", "--url", &b.url], "write it\nn\n");
    assert!(out.contains("[a]lways n\n[denied, "), "{out}");
    assert!(!no.exists(), "a denied call does not run");

    // The end of input is no, too.
    write_turn(&mock, "call_eof", &no);
    let out = chat(&["chat", "--url", &b.url], "write it\n");
    assert!(out.contains("[denied, "), "{out}");
    assert!(!no.exists());

    // Resumed, the history shows the call and who decided.
    let out = chat(&["chat", "--url", &b.url, "--session", &id], "");
    assert!(
        out.contains("[asked about fs__write_file: allow by user]")
            && out.contains("[tool fs__write_file {\"content\":\"from the terminal\"")
            && out.contains(": ok, "),
        "{out}"
    );
}

#[test]
fn chat_in_process_always_allows_the_tool_for_the_rest_of_the_session() {
    let test = "tools_chat::chat_in_process_always_allows_the_tool_for_the_rest_of_the_session";
    let Some(entry) = npm_server(test, "server-filesystem") else {
        return;
    };
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcp.json");
    let servers = json!({"mcpServers": {"fs": {"command": "node", "args": [entry, dir.path()]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let (first, second) = (dir.path().join("1.txt"), dir.path().join("2.txt"));
    write_turn(&mock, "call_1", &first);
    write_turn(&mock, "call_2", &second);
    // A hostile name and arguments: escape sequences reach the terminal as visible text.
    mock.script(json!([
        {"kind": "stream", "tool_calls": [{"id": "call_esc", "name": "\u{1b}]0;owned\u{7}",
                                           "arguments": "{\"x\": \"\u{1b}[2J\"}"}]},
        {"kind": "stream", "text": "Hm."},
    ]));
    let db = TempDb::new();
    let db_path = db.path().to_string_lossy().into_owned();
    let out = chat(
        &[
            "--db",
            &db_path,
            "chat",
            "--provider-url",
            &mock.url,
            "--mcp-config",
            &config.to_string_lossy(),
        ],
        "write one\na\nwrite two\nbe hostile\n",
    );
    assert!(out.contains("(in-process"), "{out}");
    assert_eq!(out.matches("Allow fs__write_file(").count(), 1, "{out}");
    assert_eq!(out.matches("[ok, ").count(), 2, "{out}");
    assert!(second.exists() && first.exists(), "{out}");
    assert!(out.contains("[error, "), "the unknown tool: {out}");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
}

/// Ctrl-C while `brain chat` asks about a call stops the answer at once (the stop denies
/// the call), without waiting for a line; and each later answer can be stopped too (a
/// second Ctrl-C used to quit when it came in a later answer).
#[test]
fn ctrl_c_during_a_question_stops_the_answer_and_every_answer_can_be_stopped() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let test =
        "tools_chat::ctrl_c_during_a_question_stops_the_answer_and_every_answer_can_be_stopped";
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = start(test, &mock, dir.path(), &[]) else {
        return;
    };
    let file = dir.path().join("never.txt");
    // Only the step that asks: the stop ends the attempt before a second step is needed.
    mock.script(json!({"kind": "stream", "text": "Writing.",
                       "tool_calls": [write_call("call_int", &file, "x")]}));
    let mut chat = Command::new(env!("CARGO_BIN_EXE_brain"))
        .args(["chat", "--url", &b.url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = chat.stdin.take().unwrap();
    let out = crate::terminal::Stdout::of(&mut chat);
    let interrupt = |pid: u32| {
        Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap();
    };
    stdin.write_all(b"write it\n").unwrap();
    stdin.flush().unwrap();
    out.until("[a]lways ");
    interrupt(chat.id());
    // The stream ends (the stop denied the call) with no line typed.
    out.until("[cancelled, ");
    out.until("you › ");
    assert!(chat.try_wait().unwrap().is_none(), "still chatting");
    assert!(!file.exists());
    // A later answer: Ctrl-C stops it too, rather than quitting.
    stdin
        .write_all(b"wait forever [[mock {\"hang\": true}]]\n")
        .unwrap();
    stdin.flush().unwrap();
    // This answer's own "assistant: " (the first answer's is in the output already).
    let marker = "{\"hang\": true}]]\nassistant: ";
    out.until(marker);
    interrupt(chat.id());
    // This answer's own end: the first one, stopped during its question, said so too.
    out.until_after(marker, "[stopped");
    assert!(chat.try_wait().unwrap().is_none(), "a stop, not an exit");
    interrupt(chat.id());
    // Within a deadline: a chat that does not leave fails here, it does not hang the run.
    let mut status = None;
    crate::support::wait_for(
        "the chat leaves on the second Ctrl-C",
        Duration::from_secs(10),
        || {
            status = chat.try_wait().unwrap();
            status.is_some()
        },
    );
    assert_eq!(status.and_then(|s| s.code()), Some(130));
}
