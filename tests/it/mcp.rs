//! brain's MCP client against the real reference servers (npm's server-filesystem and
//! server-everything over stdio and Streamable HTTP, PyPI's mcp-server-time), and against
//! hostile stand-ins (a server that is missing, exits at start, writes garbage or a
//! 100 MB line, or hangs). `.ci/mcp-deps` installs the real ones; without them those tests
//! skip visibly, except under CI.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use brain::tools::mcp::http::HttpLink;
use brain::tools::mcp::stdio::{Spawn, StdioLink};
use brain::tools::mcp::{LinkOptions, McpError, Server};
use serde_json::json;

use crate::support::skipped;

const DEADLINE: Duration = Duration::from_secs(30);

fn soon() -> Instant {
    Instant::now() + DEADLINE
}

pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A reference server's entry point from tests/mcp/node_modules, or a visible skip.
pub fn npm_server(test: &str, package: &str) -> Option<PathBuf> {
    let entry = root()
        .join("tests/mcp/node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if entry.exists() && node {
        return Some(entry);
    }
    skipped(
        test,
        &format!("{package} (npm) or node is missing"),
        "run .ci/mcp-deps",
    );
    None
}

fn stdio(name: &str, command: &str, args: &[&str]) -> Result<Server, McpError> {
    let how = Spawn {
        command: command.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        ..Spawn::default()
    };
    Server::initialize(
        Box::new(StdioLink::spawn(name, &how, &LinkOptions::default())?),
        soon(),
    )
}

#[test]
fn the_filesystem_server_lists_its_tools_and_writes_a_real_file() {
    let Some(entry) = npm_server(
        "mcp::the_filesystem_server_lists_its_tools_and_writes_a_real_file",
        "server-filesystem",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dir_text = dir.path().to_str().unwrap();
    let server = stdio("fs", "node", &[entry.to_str().unwrap(), dir_text]).unwrap();
    assert_eq!(server.protocol_version, "2025-06-18");
    let tools = server.list_tools(soon()).unwrap();
    let tool = |name: &str| tools.iter().find(|t| t.name == name).unwrap();
    assert!(tools.len() >= 10, "{tools:?}");
    assert!(tool("read_text_file").read_only);
    assert!(!tool("write_file").read_only);
    assert_eq!(tool("write_file").input_schema["type"], "object");

    let never = AtomicBool::new(false);
    let file = dir.path().join("note.txt");
    let wrote = server
        .call(
            "write_file",
            json!({"path": file.to_str().unwrap(), "content": "héllo from brain\n"}),
            soon(),
            &never,
        )
        .unwrap();
    assert!(!wrote.is_error, "{wrote:?}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "héllo from brain\n"
    );
    let read = server
        .call(
            "read_text_file",
            json!({"path": file.to_str().unwrap()}),
            soon(),
            &never,
        )
        .unwrap();
    assert_eq!(read.text.trim(), "héllo from brain");
    // Outside its directory: the tool fails, and says why.
    let refused = server
        .call(
            "read_text_file",
            json!({"path": "/etc/hostname"}),
            soon(),
            &never,
        )
        .unwrap();
    assert!(refused.is_error, "{refused:?}");
    assert!(
        refused.text.to_lowercase().contains("denied"),
        "{refused:?}"
    );
}

#[test]
fn the_everything_server_over_stdio_calls_renders_and_cancels() {
    let Some(entry) = npm_server(
        "mcp::the_everything_server_over_stdio_calls_renders_and_cancels",
        "server-everything",
    ) else {
        return;
    };
    let server = stdio("everything", "node", &[entry.to_str().unwrap(), "stdio"]).unwrap();
    let tools = server.list_tools(soon()).unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    let never = AtomicBool::new(false);
    let echo = server
        .call("echo", json!({"message": "ping ✓"}), soon(), &never)
        .unwrap();
    assert!(echo.text.contains("ping ✓"), "{echo:?}");
    let image = server
        .call("get-tiny-image", json!({}), soon(), &never)
        .unwrap();
    assert!(image.text.contains("[image: image/png, "), "{image:?}");

    // A 60 s operation, cancelled: the call ends at once and the server still answers.
    let cancel = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|s| {
        let call = s.spawn(|| {
            server.call(
                "trigger-long-running-operation",
                json!({"duration": 60, "steps": 5}),
                soon(),
                &cancel,
            )
        });
        // The request is out once the call has been waiting a moment; cancelling earlier
        // would be just as valid, so no wait on a condition is needed here.
        cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(call.join().unwrap(), Err(McpError::Cancelled));
    });
    assert!(started.elapsed() < Duration::from_secs(10));
    let again = server
        .call("echo", json!({"message": "still here"}), soon(), &never)
        .unwrap();
    assert!(again.text.contains("still here"));

    // A deadline ends a call that takes longer.
    let short = Instant::now() + Duration::from_millis(300);
    let slow = server.call(
        "trigger-long-running-operation",
        json!({"duration": 30, "steps": 3}),
        short,
        &never,
    );
    assert!(matches!(slow, Err(McpError::Timeout(_))), "{slow:?}");
}

/// A free port on 127.0.0.1 (a server told to use it binds it next).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// server-everything in its `streamableHttp` mode on `port`, once it says it listens.
pub(crate) fn everything_http(entry: &Path, port: u16) -> Killed {
    let mut child = Command::new("node")
        .arg(entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let child = Killed(child);
    let mut lines = BufReader::new(stderr).lines();
    let listening = lines.find(|l| l.as_ref().is_ok_and(|l| l.contains("listening")));
    assert!(listening.is_some(), "the HTTP server did not start");
    std::thread::spawn(move || lines.for_each(drop));
    child
}

#[test]
fn the_everything_server_over_streamable_http_keeps_its_session() {
    let Some(entry) = npm_server(
        "mcp::the_everything_server_over_streamable_http_keeps_its_session",
        "server-everything",
    ) else {
        return;
    };
    let port = free_port();
    let _child = everything_http(&entry, port);

    let link = HttpLink::new(
        &format!("http://127.0.0.1:{port}/mcp"),
        Vec::new(),
        &LinkOptions::default(),
    );
    let server = Server::initialize(Box::new(link), soon()).unwrap();
    let tools = server.list_tools(soon()).unwrap();
    assert!(tools.iter().any(|t| t.name == "get-sum"), "{tools:?}");
    let never = AtomicBool::new(false);
    // Several calls: each needs the session the server gave at initialize.
    for (a, b) in [(2, 3), (40, 2)] {
        let sum = server
            .call("get-sum", json!({"a": a, "b": b}), soon(), &never)
            .unwrap();
        assert!(sum.text.contains(&(a + b).to_string()), "{sum:?}");
    }
}

#[test]
fn the_time_server_from_pypi_answers() {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    let bin = target.join("mcp-venv/bin/mcp-server-time");
    if !bin.exists() {
        skipped(
            "mcp::the_time_server_from_pypi_answers",
            "mcp-server-time (PyPI) is missing",
            "run .ci/mcp-deps",
        );
        return;
    }
    let server = stdio("time", bin.to_str().unwrap(), &["--local-timezone", "UTC"]).unwrap();
    let tools = server.list_tools(soon()).unwrap();
    assert!(
        tools.iter().any(|t| t.name == "get_current_time"),
        "{tools:?}"
    );
    let never = AtomicBool::new(false);
    let now = server
        .call(
            "get_current_time",
            json!({"timezone": "UTC"}),
            soon(),
            &never,
        )
        .unwrap();
    assert!(now.text.contains("UTC"), "{now:?}");
}

#[test]
fn missing_crashing_garbage_flooding_and_hanging_servers_are_clear_errors() {
    let missing = stdio("missing", "/nonexistent/mcp-server", &[]);
    assert!(
        matches!(missing, Err(McpError::Spawn(_))),
        "{:?}",
        missing.err()
    );

    let crashed = stdio(
        "crash",
        "sh",
        &["-c", "echo 'fatal: no config' >&2; exit 3"],
    );
    let Err(McpError::Closed(why)) = crashed else {
        panic!("{:?}", crashed.err())
    };
    assert!(
        why.contains("exited") && why.contains("fatal: no config"),
        "{why}"
    );

    let garbage = stdio(
        "garbage",
        "sh",
        &["-c", "read l; echo 'Server starting...'; sleep 30"],
    );
    let Err(McpError::Closed(why)) = garbage else {
        panic!("{:?}", garbage.err())
    };
    assert!(
        why.contains("not JSON-RPC") && why.contains("Server starting"),
        "{why}"
    );

    // 100 MB on one line: read up to the bound, then the server is closed.
    let flood = stdio(
        "flood",
        "python3",
        &[
            "-c",
            "import sys; sys.stdin.readline(); sys.stdout.write('x' * 100_000_000)",
        ],
    );
    let Err(McpError::Closed(why)) = flood else {
        panic!("{:?}", flood.err())
    };
    assert!(why.contains("longer than"), "{why}");

    let started = Instant::now();
    let how = Spawn {
        command: "sh".into(),
        args: vec!["-c".into(), "sleep 60".into()],
        ..Spawn::default()
    };
    let link = StdioLink::spawn("hang", &how, &LinkOptions::default()).unwrap();
    let hung = Server::initialize(Box::new(link), Instant::now() + Duration::from_millis(500));
    assert!(
        matches!(hung, Err(McpError::Timeout(_))),
        "{:?}",
        hung.err()
    );
    // Dropping it closed and killed the process within the grace period.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
