//! Helpers shared by the integration tests.

use std::path::PathBuf;

use brain::clock::Clock;
use brain::session::events::{
    AssistantTurn, CompactionApplied, PendingState, SessionArchived, SessionTitled, TitledBy,
    TurnFailed, TurnMemory, Usage, UserMessage,
};
use brain::session::{Payload, Store, StoreOptions, SyncMode};

/// A fresh database in its own temporary directory (removed on drop).
pub struct TempDb {
    pub dir: tempfile::TempDir,
}

impl TempDb {
    pub fn new() -> TempDb {
        TempDb {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("brain.db")
    }

    /// Opens the store with `synchronous=NORMAL` (crash-safe, quicker than FULL in tests).
    pub fn open(&self) -> Store {
        self.open_with(Clock::system())
    }

    pub fn open_with(&self, clock: Clock) -> Store {
        Store::open(
            &self.path(),
            StoreOptions {
                sync: SyncMode::Normal,
                clock,
                ..StoreOptions::default()
            },
        )
        .expect("open store")
    }

    /// A raw connection to the same file, for looking underneath the store.
    pub fn raw(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.path()).expect("raw connection")
    }
}

pub fn user(text: &str) -> Payload {
    Payload::UserMessage(UserMessage { text: text.into() })
}

pub fn answer(turn: u64, attempt: u32, text: &str) -> Payload {
    Payload::AssistantTurn(AssistantTurn {
        turn,
        attempt,
        text: text.into(),
        reasoning: None,
        provider: "mock".into(),
        model: "m".into(),
        finish_reason: Some("stop".into()),
        usage: Usage::default(),
        duration_ms: 1,
        ledger_id: None,
        steps: 1,
    })
}

pub fn pending(turn: u64, attempt: u32, text: &str) -> Payload {
    Payload::PendingState(PendingState {
        turn,
        attempt,
        text: text.into(),
        reasoning: None,
        ended: None,
        step: None,
    })
}

pub fn failed(turn: u64, attempt: u32, code: &str) -> Payload {
    Payload::TurnFailed(TurnFailed {
        turn,
        attempt,
        code: code.into(),
        message: "it failed".into(),
        reasoning: None,
    })
}

pub fn memory(turn: u64, attempt: u32) -> Payload {
    Payload::TurnMemory(TurnMemory {
        turn,
        attempt,
        files_changed: vec![],
        failures: vec![],
        key_findings: vec!["k".into()],
    })
}

pub fn compaction(summary: &str, through: u64) -> Payload {
    Payload::CompactionApplied(CompactionApplied {
        summary: summary.into(),
        replaces_through_seq: through,
        tokens_before: 100,
        tokens_after: 10,
        model: "m".into(),
        method: brain::session::events::method::LLM.into(),
    })
}

pub fn titled(title: &str, by: TitledBy) -> Payload {
    Payload::SessionTitled(SessionTitled {
        title: title.into(),
        by,
    })
}

pub fn archived(archived: bool) -> Payload {
    Payload::SessionArchived(SessionArchived { archived })
}

/// Asserts a session's seqs are exactly 1..=n.
pub fn assert_gapless(seqs: &[u64]) {
    for (i, seq) in seqs.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1, "seqs not gapless: {seqs:?}");
    }
}

/// `examples/mock_llm` running as a child process on a free port; killed on drop.
pub struct MockLlm {
    child: std::process::Child,
    /// The API base, `http://127.0.0.1:PORT/v1`.
    pub url: String,
}

impl MockLlm {
    pub fn start(args: &[&str]) -> MockLlm {
        use std::io::BufRead;
        // `cargo test` builds the examples next to the test binaries' `deps` folder.
        let exe = std::env::current_exe().expect("test binary path");
        let bin = exe
            .parent()
            .and_then(|deps| deps.parent())
            .map(|dir| dir.join("examples").join("mock_llm"))
            .expect("target dir");
        assert!(
            bin.exists(),
            "{} missing: run `cargo build --examples`",
            bin.display()
        );
        // A caller's `--port` (to bring a stopped mock back where it was) wins.
        let port: &[&str] = if args.contains(&"--port") {
            &[]
        } else {
            &["--port", "0"]
        };
        let mut child = std::process::Command::new(&bin)
            .args(port)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start mock_llm");
        let stdout = child.stdout.take().expect("mock stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("mock banner");
        let url = line.trim().rsplit(' ').next().expect("mock url").to_owned();
        MockLlm { child, url }
    }

    /// Queues scripted steps (see `examples/mock_llm.rs`).
    pub fn script(&self, steps: serde_json::Value) {
        self.post("_mock/script", steps);
    }

    /// The step every later non-streamed request of a purpose (`summary`, `memory`,
    /// `title`) gets when no queued step is for it.
    pub fn defaults(&self, purposes: serde_json::Value) {
        self.post("_mock/defaults", purposes);
    }

    pub fn requests(&self) -> Vec<serde_json::Value> {
        self.get("_mock/requests")
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub fn stats(&self) -> serde_json::Value {
        self.get("_mock/stats")
    }

    /// How later `GET /models` answer: `ok`, `fail`, `hang` or `endless`.
    pub fn models_mode(&self, mode: &str) {
        self.post("_mock/models", serde_json::json!({"mode": mode}));
    }

    /// The port it listens on (to start it again there after dropping it).
    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|rest| rest.trim_end_matches("/v1").parse().ok())
            .expect("mock port")
    }

    fn root(&self) -> String {
        self.url.trim_end_matches("/v1").to_owned()
    }

    fn get(&self, path: &str) -> serde_json::Value {
        let body = ureq::get(&format!("{}/{path}", self.root()))
            .call()
            .expect("mock control call")
            .into_body()
            .read_to_string()
            .expect("mock body");
        serde_json::from_str(&body).expect("mock json")
    }

    fn post(&self, path: &str, body: serde_json::Value) {
        ureq::post(&format!("{}/{path}", self.root()))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .expect("mock control call");
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether this is a CI run (`CI` set), where every test must run for real.
pub fn under_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Reports that `test` cannot run here because `missing`, and how to `enable` it. Under CI
/// that is a failure; elsewhere the test passes with a [`skip_notice`].
pub fn skipped(test: &str, missing: &str, enable: &str) {
    assert!(
        !under_ci(),
        "{test} must run under CI, but {missing}. To run it: {enable}"
    );
    skip_notice(test, &format!("{missing}. To run it: {enable}"));
}

/// A `SKIPPED <test>: <why>` line in the output of a plain `cargo test`. libtest captures
/// only what the `print!` family writes (rust-lang/rust#90785), and shows a passing test's
/// captured output only with `--nocapture`, so the line goes to the process's stderr
/// directly.
pub fn skip_notice(test: &str, why: &str) {
    use std::io::Write;
    let line = format!("\nSKIPPED {test}: {why}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Runs one test of this binary in a child process (with `env` changed, `None` removing a
/// variable): its exit status and everything it wrote, stdout then stderr.
pub fn run_this_test(name: &str, env: &[(&str, Option<&str>)]) -> (bool, String) {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = std::process::Command::new(exe);
    cmd.args([name, "--exact", "--test-threads", "1"]);
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().expect("run the test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `brain --db DB --sync normal serve --listen 127.0.0.1:0 --distill off --provider-url P`,
/// its standard error discarded; add arguments or settings before [`spawn_serve`].
pub fn serve_command(db: &TempDb, provider: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_brain"));
    cmd.arg("--db")
        .arg(db.path())
        .args(["--sync", "normal", "serve", "--listen", "127.0.0.1:0"])
        .args(["--distill", "off", "--provider-url", provider])
        .stderr(std::process::Stdio::null());
    cmd
}

/// Starts a server command and reads its banner (`brain serving URL …`): the child and
/// its URL.
pub fn spawn_serve(cmd: &mut std::process::Command) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start brain serve");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("banner");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    (child, url)
}

/// Runs the brain binary with `args`, `stdin` written to it and closed, and waits for it.
pub fn run_brain<S: AsRef<std::ffi::OsStr>>(args: &[S], stdin: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_brain"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start brain");
    if let Some(mut input) = child.stdin.take() {
        // A command that does not read its input may have closed it already.
        let _ = input.write_all(stdin);
    }
    child.wait_with_output().expect("brain's output")
}

/// [`run_brain`] on the database `db`.
pub fn run_brain_on(db: &TempDb, args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut all: Vec<std::ffi::OsString> = vec!["--db".into(), db.path().into()];
    all.extend(args.iter().map(std::ffi::OsString::from));
    run_brain(&all, stdin)
}

/// How long a test waits for the background purge of a small session.
pub const PURGE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until `done` holds, polling, and fails the test after `deadline`.
pub fn wait_for(what: &str, deadline: std::time::Duration, mut done: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + deadline;
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "gave up after {deadline:?} waiting until {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The session a `brain chat` transcript talked in: `[new session ID]` once its first
/// message made it, or the banner's `session ID (…)` when it resumed one.
pub fn chat_session(out: &str) -> String {
    out.split("[new session ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .or_else(|| out.strip_prefix("session ")?.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session in {out}"))
        .to_owned()
}
