//! A real PostgreSQL restart under a running `brain serve` (issue 27): sends after a fast
//! and an immediate restart, and while the database is down, succeed or answer 503
//! `unavailable`, never 500; no message acknowledged is lost, none is written twice.
//!
//! The test starts a throwaway PostgreSQL of its own (initdb on a free port, as
//! `.ci/postgres-up` does; the shared test server must not be restarted). It skips,
//! visibly, when PostgreSQL is not installed, except under `CI`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::server::{Brain, agent, call, new_session};
use crate::support::*;
use crate::team_e2e::serve_on;

/// A PostgreSQL cluster of this test's own, stopped and removed on drop.
struct OwnPostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

/// The newest installed PostgreSQL's programs (`/usr/lib/postgresql/N/bin`).
fn postgres_bin() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|d| d.ok().map(|d| d.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
    });
    found.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

impl OwnPostgres {
    fn start(test: &str) -> Option<OwnPostgres> {
        let Some(bin) = postgres_bin() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: PostgreSQL is not installed, and under CI this test must run \
                 (.ci/postgres-up installs it)"
            );
            let line = format!("\nSKIPPED {test}: PostgreSQL is not installed (no initdb)\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = OwnPostgres { bin, dir, port };
        if is_root() {
            // initdb refuses root: the cluster belongs to `postgres`.
            let owner = Command::new("chown")
                .args(["postgres"])
                .arg(pg.dir.path())
                .status();
            assert!(owner.is_ok_and(|s| s.success()), "chown postgres");
        }
        let data = pg.data();
        pg.run("initdb", &["-D", &data, "-U", "postgres", "-A", "trust"]);
        pg.start_again();
        Some(pg)
    }

    /// `pg_ctl start` on the test's port and socket directory (a stopped server forgets
    /// them: only `restart` reuses the last options).
    fn start_again(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-o",
                &options,
                "-w",
                "start",
            ],
        );
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs one of PostgreSQL's programs (as `postgres` when the test runs as root).
    fn run(&self, program: &str, args: &[&str]) {
        let exe = self.bin.join(program);
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        // Into a file, not a pipe: the server pg_ctl starts keeps what it inherits open, and
        // reading a pipe to its end would wait for the server to exit.
        let out_path = self.dir.path().join(format!("{program}.out"));
        let out = std::fs::File::create(&out_path).unwrap();
        let status = cmd
            .args(args)
            .current_dir(Path::new("/"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .status()
            .unwrap();
        if !status.success() {
            let said = std::fs::read_to_string(&out_path).unwrap_or_default();
            let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
            panic!("{program} {args:?}: {status}: {said}\nserver log:\n{log}");
        }
    }

    /// `pg_ctl restart -m MODE`: every connection ends, the server is back when it returns.
    fn restart(&self, mode: &str) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", mode, "-w", "restart"]);
    }

    fn stop(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let data = self.data();
        let exe = self.bin.join("pg_ctl");
        let args = ["-D", data.as_str(), "-m", "immediate", "stop"];
        let _ = if is_root() {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&exe)
                .args(args)
                .output()
        } else {
            Command::new(&exe).args(args).output()
        };
    }
}

/// Sends `text`: the status, and the `end` frame (200) or the error body.
fn send(b: &Brain, id: &str, text: &str) -> (u16, Value) {
    let resp = agent()
        .post(&format!("{}/v1/sessions/{id}/messages", b.url))
        .header("Content-Type", "application/json")
        .send(json!({ "message": text }).to_string())
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().read_to_string().unwrap_or_default();
    if status != 200 {
        return (status, serde_json::from_str(&body).unwrap_or(Value::Null));
    }
    let end = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|f| f["type"] == "end")
        .unwrap_or(Value::Null);
    (status, end)
}

/// Sends `text`; a 200 must end completed and anything else be 503 `unavailable`.
fn send_checked(b: &Brain, id: &str, text: &str) -> u16 {
    let (status, body) = send(b, id, text);
    match status {
        200 => assert_eq!(body["status"], "completed", "{text}: {body}"),
        503 => assert_eq!(body["error"], "unavailable", "{text}: {body}"),
        _ => panic!("{text}: {status} {body}"),
    }
    status
}

/// How many user messages of the session say `text`.
fn copies(b: &Brain, id: &str, text: &str) -> usize {
    let (status, events) = call(b, "GET", &format!("/v1/sessions/{id}/events"), None);
    assert_eq!(status, 200, "{events}");
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "user_message" && e["payload"]["text"] == text)
        .count()
}

#[test]
fn sends_through_a_database_restart_succeed_or_are_unavailable_and_none_is_lost_or_doubled() {
    let test = "sends_through_a_database_restart";
    let Some(pg) = OwnPostgres::start(test) else {
        return;
    };
    let mock = MockLlm::start(&[]);
    let brain = serve_on(&pg.url(), &mock);
    let id = new_session(&brain);
    let mut sent: Vec<(String, u16)> = Vec::new();
    let mut send_one = |text: String| {
        let status = send_checked(&brain, &id, &text);
        sent.push((text, status));
        status
    };
    send_one("before".into());
    for (round, mode) in ["fast", "immediate", "fast", "immediate"]
        .iter()
        .enumerate()
    {
        pg.restart(mode);
        for i in 0..3 {
            send_one(format!("after {mode} restart {round}, send {i}"));
        }
    }
    // While it is down: 503, never 500; and answered again once it is back.
    pg.stop();
    assert_eq!(send_one("while down".into()), 503);
    pg.start_again();
    send_one("up again".into());
    for (text, status) in &sent {
        let n = copies(&brain, &id, text);
        match status {
            200 => assert_eq!(n, 1, "{text} was acknowledged"),
            _ => assert!(n <= 1, "{text} written {n} times"),
        }
    }
    let acked = sent.iter().filter(|s| s.1 == 200).count();
    // Every send after a restart found the database back: each one is answered.
    assert!(acked >= sent.len() - 1, "{sent:?}");
}
