//! `brain chat` in a real terminal (tmux, issue 34): arrow keys edit the line instead of
//! landing in the message, a pasted indented block is one message with its bytes, the
//! history file is the user's only, no log record is printed over the prompt, a chat
//! left at once leaves no empty session, and answers are styled markdown on a terminal only.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use brain::session::events::{Decoded, Payload};

use crate::support::{MockLlm, TempDb, run_brain_on, skipped, wait_for};

/// How long a pane may take to show what the test waits for.
const PANE_WAIT: Duration = Duration::from_secs(20);

/// One tmux server of the test's own (its socket in the test's directory), so tests never
/// meet each other's or the user's sessions.
struct Tmux {
    socket: std::path::PathBuf,
}

impl Tmux {
    /// Starts `command` in a 120×40 pane; `None` (the test skipped, or failed under CI)
    /// without tmux.
    fn start(test: &str, dir: &Path, command: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            skipped(test, "tmux", "run .ci/tmux-deps");
            return None;
        }
        let tmux = Tmux {
            socket: dir.join("tmux.sock"),
        };
        let ok = tmux
            .cmd(&[
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                "120",
                "-y",
                "40",
                command,
            ])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux did not start");
        Some(tmux)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        // "no server running" once the chat has left is an answer, not noise.
        c.arg("-S")
            .arg(&self.socket)
            .args(args)
            .stderr(std::process::Stdio::null());
        c
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status().unwrap().success());
    }

    /// Pastes `text` as a terminal does when the program asked for bracketed paste.
    fn paste(&self, text: &str) {
        assert!(
            self.cmd(&["set-buffer", "-b", "p", text])
                .status()
                .unwrap()
                .success()
        );
        let pasted = self
            .cmd(&["paste-buffer", "-p", "-b", "p", "-t", "t"])
            .status();
        assert!(pasted.unwrap().success());
    }

    fn pane(&self) -> String {
        let out = self
            .cmd(&["capture-pane", "-p", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane with its attributes, as SGR escapes.
    fn styled_pane(&self) -> String {
        let out = self
            .cmd(&["capture-pane", "-e", "-p", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the pane shows `n` occurrences of `text`; returns the pane.
    fn until(&self, text: &str, n: usize) -> String {
        let mut pane = String::new();
        wait_for(&format!("the pane shows {text:?} ×{n}"), PANE_WAIT, || {
            pane = self.pane();
            pane.matches(text).count() >= n
        });
        pane
    }

    /// Whether the pane's program still runs.
    fn running(&self) -> bool {
        self.cmd(&["has-session", "-t", "t"])
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

/// The chat command a pane runs: the test's data directory, database and provider.
fn chat_command(db: &TempDb, data: &Path, provider: &str) -> String {
    format!(
        "env XDG_DATA_HOME={} RUST_LOG=warn {} --db {} chat --provider-url {provider}",
        data.display(),
        env!("CARGO_BIN_EXE_brain"),
        db.path().display()
    )
}

/// The user messages of the store's only session, as stored.
fn user_messages(db: &TempDb) -> Vec<String> {
    let store = db.open();
    let ids = store.session_ids().unwrap();
    assert_eq!(ids.len(), 1, "one session");
    store
        .events(ids[0], 0, None)
        .unwrap()
        .iter()
        .filter_map(|e| match e.decode() {
            Decoded::Known(Payload::UserMessage(m)) => Some(m.text),
            _ => None,
        })
        .collect()
}

#[test]
fn arrow_keys_edit_the_line_and_a_pasted_block_is_one_message_as_pasted() {
    let db = TempDb::new();
    let data = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(&[]);
    let command = chat_command(&db, data.path(), &mock.url);
    let Some(tty) = Tmux::start(
        "chat_tty::arrow_keys_edit_the_line_and_a_pasted_block_is_one_message_as_pasted",
        data.path(),
        &command,
    ) else {
        return;
    };
    tty.until("you ›", 1);
    // Before: `test\x1b[D\x1b[DX` was saved; the cursor now moves back two places.
    tty.keys(&["test", "Left", "Left", "X", "Enter"]);
    tty.until("to: teXst", 1);
    tty.until("you ›", 2);
    let block = "first line\n    indented line\n\tand a tab\nlast";
    tty.paste(block);
    tty.keys(&["Enter"]);
    let pane = tty.until("mock answer", 2);
    assert_eq!(
        pane.matches("assistant: ").count(),
        2,
        "one answer for the paste: {pane}"
    );
    tty.until("you ›", 3);
    tty.keys(&["C-d"]);
    wait_for("the chat leaves on Ctrl-D", PANE_WAIT, || !tty.running());
    assert_eq!(user_messages(&db), ["teXst", block]);
    let history = data.path().join("brain").join("chat_history");
    let mode = std::fs::metadata(&history).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the history is the user's only");
    let kept = std::fs::read_to_string(&history).unwrap();
    assert!(kept.contains("teXst"), "{kept}");
}

#[test]
fn no_log_record_is_printed_over_the_prompt_and_the_log_goes_to_a_file() {
    let db = TempDb::new();
    let data = tempfile::tempdir().unwrap();
    // Nothing listens there: the turn fails, and brain logs a warning about it.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", gone.local_addr().unwrap());
    drop(gone);
    let command = chat_command(&db, data.path(), &url);
    let Some(tty) = Tmux::start(
        "chat_tty::no_log_record_is_printed_over_the_prompt_and_the_log_goes_to_a_file",
        data.path(),
        &command,
    ) else {
        return;
    };
    tty.until("you ›", 1);
    tty.keys(&["hello", "Enter"]);
    tty.until("[failed", 1);
    let pane = tty.until("you ›", 2);
    assert!(
        !pane.contains("WARN"),
        "a log record on the terminal: {pane}"
    );
    tty.keys(&["C-d"]);
    wait_for("the chat leaves on Ctrl-D", PANE_WAIT, || !tty.running());
    let log = std::fs::read_to_string(data.path().join("brain").join("chat.log")).unwrap();
    assert!(log.contains("WARN"), "the warning went to the file: {log}");
}

/// Before: every start made an "(untitled)" session, used or not.
#[test]
fn a_chat_left_before_its_first_message_leaves_no_session() {
    let db = TempDb::new();
    let mock = MockLlm::start(&[]);
    for input in [&b""[..], b"/retry\n/fork\n/edit x\n"] {
        let out = run_brain_on(&db, &["chat", "--provider-url", &mock.url], input);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with("a new session ("), "{text}");
        if !input.is_empty() {
            assert!(
                text.contains("[nothing to retry yet: send a message first]")
                    && text.contains("[nothing to fork yet")
                    && text.contains("[nothing to edit yet"),
                "{text}"
            );
        }
    }
    assert!(db.open().session_ids().unwrap().is_empty());
}

/// An answer with a heading, bold, a code span and a fenced block, cut into one chunk per
/// word by the mock, so markers arrive split.
const MARKDOWN: &str =
    "# Plan\n\nSome **bold words** and `a_code` here.\n\n```rust\nlet x = 1;\n```\n";

/// Runs one scripted markdown answer in a tmux pane with `env` before the command; returns
/// the pane with its escapes once the answer ended.
fn markdown_answer_in_a_pane(test: &str, env: &str) -> Option<String> {
    let db = TempDb::new();
    let data = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(&[]);
    mock.script(serde_json::json!({"text": MARKDOWN}));
    let command = format!("env {env} {}", chat_command(&db, data.path(), &mock.url));
    let tty = Tmux::start(test, data.path(), &command)?;
    tty.until("you ›", 1);
    tty.keys(&["show me", "Enter"]);
    tty.until("let x = 1;", 1);
    tty.until("you ›", 2);
    let pane = tty.styled_pane();
    tty.keys(&["C-d"]);
    wait_for("the chat leaves on Ctrl-D", PANE_WAIT, || !tty.running());
    Some(pane)
}

/// The SGR parameters of the escapes right before the first `text` in `pane` (tmux writes
/// only what changed since the character before, one escape or several).
fn sgr_before(pane: &str, text: &str) -> Vec<u32> {
    let at = pane
        .find(text)
        .unwrap_or_else(|| panic!("no {text:?} in {pane:?}"));
    sgr_at(pane, at)
}

/// The SGR parameters of the escapes right before byte `at` of `pane`.
fn sgr_at(pane: &str, at: usize) -> Vec<u32> {
    let mut codes = Vec::new();
    let mut before = &pane[..at];
    while before.ends_with('m') {
        let Some(esc) = before.rfind("\x1b[") else {
            break;
        };
        let params = &before[esc + 2..before.len() - 1];
        let Ok(mut these) = params
            .split(';')
            .map(str::parse)
            .collect::<Result<Vec<u32>, _>>()
        else {
            break;
        };
        these.append(&mut codes);
        codes = these;
        before = &before[..esc];
    }
    codes
}

/// Issue 34 (4): answers were raw markdown on a terminal.
#[test]
fn a_markdown_answer_is_styled_in_a_terminal_without_its_markers() {
    let test = "chat_tty::a_markdown_answer_is_styled_in_a_terminal_without_its_markers";
    let Some(pane) = markdown_answer_in_a_pane(test, "-u NO_COLOR") else {
        return;
    };
    // Bold 1, dim 2, underline 4, cyan 36.
    let has = |text: &str, want: &[u32]| {
        let codes = sgr_before(&pane, text);
        assert!(
            want.iter().all(|w| codes.contains(w)),
            "{text:?} has {codes:?}, not {want:?}: {pane:?}"
        );
    };
    has("Plan", &[1, 4]);
    has("bold words", &[1]);
    has("a_code", &[36]);
    has("```rust", &[2]);
    has("let x = 1;", &[36]);
    for marker in ["# Plan", "**", "`a_code`"] {
        assert!(!pane.contains(marker), "{marker:?} shown: {pane:?}");
    }
    // The prompt after the answer is drawn with no attribute left over (resets only).
    let codes = sgr_at(&pane, pane.rfind("you ›").unwrap());
    assert!(codes.iter().all(|c| [0, 39, 49].contains(c)), "{codes:?}");
}

/// https://no-color.org: `NO_COLOR` set keeps the answer as it was sent, on a terminal too.
#[test]
fn no_color_keeps_the_markdown_as_sent_in_a_terminal() {
    let test = "chat_tty::no_color_keeps_the_markdown_as_sent_in_a_terminal";
    let Some(pane) = markdown_answer_in_a_pane(test, "NO_COLOR=1") else {
        return;
    };
    assert!(!pane.contains('\x1b'), "{pane:?}");
    assert!(
        pane.contains("assistant: # Plan") && pane.contains("Some **bold words** and `a_code`"),
        "{pane}"
    );
}

/// Through a pipe the answer is the bytes the model sent, as before styling existed.
#[test]
fn a_piped_chat_prints_the_markdown_byte_for_byte() {
    let db = TempDb::new();
    let mock = MockLlm::start(&[]);
    mock.script(serde_json::json!({"text": MARKDOWN}));
    let out = run_brain_on(&db, &["chat", "--provider-url", &mock.url], b"show me\n");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let answer = format!("]\nassistant: {MARKDOWN}\n\n");
    assert!(text.ends_with(&answer), "{text:?}");
    assert!(!text.contains('\x1b'), "{text:?}");
}
