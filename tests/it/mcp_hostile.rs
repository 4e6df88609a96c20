//! Hostile MCP servers against a real `brain serve` (issue 27, item 7): messages past
//! `--max-tool-result-bytes` × 4 (SPEC §12) over stdio and Streamable HTTP fail the call,
//! never brain's memory, and the turn goes on; a server's own children do not outlive a
//! SIGKILL of brain past its next start.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;
use crate::tools_faults::{
    Serving, Stand, alive, call, executions, log, said, serve, turn, wait_for,
};
use crate::tools_loop::session;

/// The bound with the default `--max-tool-result-bytes` (64 KiB × 4).
const DEFAULT_BOUND: usize = 262_144;

/// How much brain's peak memory may grow while a server floods it: far below the 16 MiB a
/// message could take before the bound followed `--max-tool-result-bytes`.
const MEMORY_SLACK_KIB: u64 = 8 * 1024;

/// The process's peak resident memory (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"))
}

/// A brain serving the stand-in with `tools`, and a session on it.
struct Rig {
    mock: MockLlm,
    stand: Stand,
    b: Serving,
    id: String,
    _db: TempDb,
}

fn rig(tools: &str, extra: &[&str]) -> Rig {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(&db, &mock, &stand.config(tools, None), extra);
    let id = session(&b.url);
    Rig {
        mock,
        stand,
        b,
        id,
        _db: db,
    }
}

/// Brain's peak memory has grown by less than [`MEMORY_SLACK_KIB`] since `before`.
fn grown_little(pid: u32, before: u64) {
    let grown = peak_rss_kib(pid).saturating_sub(before);
    assert!(
        grown < MEMORY_SLACK_KIB,
        "brain's peak memory grew by {grown} KiB"
    );
}

fn completed(url: &str, id: &str, message: &str) -> String {
    let (end, seen) = turn(url, id, message);
    assert_eq!(end["status"], "completed", "{seen:#?}");
    said(&seen)
}

fn too_long(said: &str, call_id: &str, bound: usize) {
    assert!(
        said.contains(&format!("tool {call_id}: the MCP server"))
            && said.contains(&format!("longer than {bound} bytes"))
            && said.contains("--max-tool-result-bytes"),
        "{said}"
    );
}

#[test]
fn a_stdio_server_answering_300_kib_fails_the_call_naming_the_bound_and_is_restarted() {
    // The database goes last, after brain.
    let Rig {
        _db,
        mock,
        stand,
        b,
        id,
    } = rig("echo,big", &[]);
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("c1", "s__big", json!({"bytes": 300_000})),
                                          call("c2", "s__echo", json!({"n": 2}))]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let said = completed(&b.url, &id, "a big answer, then echo");
    too_long(&said, "c1", DEFAULT_BOUND);
    assert!(said.contains("tool c2: echo {\"n\": 2}"), "{said}");
    assert_eq!(
        executions(&log(&b.url, &id)),
        [("c1".into(), "error".into()), ("c2".into(), "ok".into())]
    );
    let pids = stand.pids();
    assert_eq!(pids.len(), 2, "ended, and started again for the next call");
    wait_for("the flooding server killed", || !alive(pids[0]));
}

#[test]
fn the_bound_follows_max_tool_result_bytes() {
    let Rig {
        _db,
        stand: _stand,
        mock,
        b,
        id,
    } = rig("big", &["--max-tool-result-bytes", "100000"]);
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("c1", "s__big", json!({"bytes": 300_000})),
                                          call("c2", "s__big", json!({"bytes": 500_000}))]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let said = completed(&b.url, &id, "two big answers");
    // 300,000 bytes fit in 4 × 100,000: read, then cut for the model.
    assert!(said.contains("tool c1: xxxx"), "{said}");
    too_long(&said, "c2", 400_000);
}

#[test]
fn a_stdio_line_of_20_mib_without_a_newline_leaves_brains_memory_bounded() {
    // The database goes last, after brain.
    let Rig {
        _db,
        mock,
        stand,
        b,
        id,
    } = rig("echo,flood", &[]);
    // A first turn with a call: what a turn costs is in the baseline.
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("w1", "s__echo", json!({}))]},
        {"kind": "stream", "quote_tools": true},
    ]));
    completed(&b.url, &id, "warm up");
    let before = peak_rss_kib(b.child.id());
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("c1", "s__flood", json!({"bytes": 20_000_000})),
                                          call("c2", "s__echo", json!({"after": "flood"}))]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let said = completed(&b.url, &id, "flood");
    too_long(&said, "c1", DEFAULT_BOUND);
    assert!(
        said.contains("tool c2: echo {\"after\": \"flood\"}"),
        "{said}"
    );
    grown_little(b.child.id(), before);
    let first = stand.pids()[0];
    wait_for("the flooding server killed", || !alive(first));
}

/// A Streamable HTTP MCP server on 127.0.0.1 whose `big` answers a 1 MiB JSON body and
/// whose `stream` answers one SSE event of 20 MiB that never ends; `echo` answers small.
fn hostile_http() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = answer_http(conn);
            });
        }
    });
    port
}

fn answer_http(mut conn: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut length = 0;
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let l = line.trim_end().to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let m: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = |conn: &mut TcpStream, result: Value| {
        let text = json!({"jsonrpc": "2.0", "id": m["id"], "result": result}).to_string();
        write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{text}",
            text.len()
        )
    };
    let text = |t: String| json!({"content": [{"type": "text", "text": t}]});
    match (m["method"].as_str(), m["params"]["name"].as_str()) {
        (Some("initialize"), _) => reply(
            &mut conn,
            json!({"protocolVersion": m["params"]["protocolVersion"], "capabilities": {},
                   "serverInfo": {"name": "hostile", "version": "1"}}),
        ),
        (Some("tools/list"), _) => {
            let tools: Vec<Value> = ["big", "stream", "echo"]
                .iter()
                .map(|t| json!({"name": t, "inputSchema": {"type": "object"}}))
                .collect();
            reply(&mut conn, json!({"tools": tools}))
        }
        (Some("tools/call"), Some("big")) => reply(&mut conn, text("x".repeat(1 << 20))),
        (Some("tools/call"), Some("stream")) => {
            conn.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                  Connection: close\r\n\r\ndata: ",
            )?;
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..320 {
                conn.write_all(&chunk)?;
            }
            Ok(())
        }
        (Some("tools/call"), _) => reply(&mut conn, text(format!("echo {}", m["params"]))),
        (Some(_), _) => reply(&mut conn, json!({})),
        // A notification, or the closing DELETE.
        (None, _) => conn.write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"),
    }
}

#[test]
fn an_http_server_answering_a_huge_body_or_event_fails_the_call_and_memory_stays_bounded() {
    let port = hostile_http();
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcp.json");
    let server = json!({"url": format!("http://127.0.0.1:{port}/mcp"),
                        "allow": ["big", "stream", "echo"]});
    std::fs::write(&config, json!({"mcpServers": {"h": server}}).to_string()).unwrap();
    let b = serve(&db, &mock, &config, &[]);
    let id = session(&b.url);
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("w1", "h__echo", json!({}))]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let warm = completed(&b.url, &id, "warm up");
    assert!(warm.contains("tool w1: echo"), "{warm}");
    let before = peak_rss_kib(b.child.id());
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("c1", "h__big", json!({})),
                                          call("c2", "h__stream", json!({})),
                                          call("c3", "h__echo", json!({"n": 3}))]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let said = completed(&b.url, &id, "big, stream, echo");
    too_long(&said, "c1", DEFAULT_BOUND);
    assert!(said.contains("an answer longer than"), "{said}");
    too_long(&said, "c2", DEFAULT_BOUND);
    assert!(said.contains("an event longer than"), "{said}");
    assert!(said.contains("tool c3: echo"), "{said}");
    grown_little(b.child.id(), before);
}

#[test]
fn sigkill_of_brain_leaves_no_child_of_an_mcp_server_running_past_the_next_start() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let dir = stand.dir.path();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/stand_in.py");
    let grandchild_file = dir.join("grandchild");
    // A wrapper that starts a child of its own, then becomes the server (as `npx` does).
    let wrapper = format!(
        "sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > '{}'; exec python3 '{}'",
        grandchild_file.display(),
        script.display()
    );
    let server = json!({"command": "sh", "args": ["-c", wrapper],
        "env": {"STAND_IN_TOOLS": "echo", "STAND_IN_PIDFILE": stand.pids_file()}});
    let config = dir.join("wrapped.json");
    std::fs::write(&config, json!({"mcpServers": {"w": server}}).to_string()).unwrap();
    let mut b = serve(&db, &mock, &config, &[]);
    let deadline = Duration::from_secs(30);
    let grandchild = || -> Option<u32> {
        std::fs::read_to_string(&grandchild_file)
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    wait_for("the server and its child", || {
        grandchild().is_some() && !stand.pids().is_empty()
    });
    let (server, child) = (stand.pids()[0], grandchild().unwrap());
    assert!(alive(server) && alive(child));

    b.child.kill().unwrap(); // SIGKILL
    b.child.wait().unwrap();
    crate::support::wait_for("the server gone with brain", deadline, || !alive(server));
    assert!(
        alive(child),
        "the wrapper's own child outlives brain (nothing can signal it at once)"
    );

    // The next start on this database ends what the killed one left.
    let _again = serve(&db, &mock, &config, &[]);
    crate::support::wait_for("the left-behind child killed", deadline, || !alive(child));
    // Its own server runs (a new one), untouched by the clean-up.
    crate::support::wait_for("the new server", deadline, || stand.pids().len() == 2);
    assert!(alive(stand.pids()[1]));
}

/// The start time (clock ticks since boot) of process `pid`.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The last time heard of every group the brains on `db` recorded (`<db>.mcp-groups`).
fn recorded_seen(db: &Path) -> Vec<u64> {
    let mut dir = db.as_os_str().to_owned();
    dir.push(".mcp-groups");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|l| l.split(' ').nth(2)?.parse().ok())
                .collect::<Vec<u64>>()
        })
        .collect()
}

#[test]
fn sigkill_of_brain_while_a_server_is_slow_to_start_ends_what_it_started_late() {
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let db = TempDb::new();
    let (go, late_file) = (dir.path().join("go"), dir.path().join("late"));
    // A wrapper still fetching its package (until `go`), then starting its real server in
    // the background, never answering yet (as `npx` does on a cold cache).
    let wrapper = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done; \
         sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > '{}'; exec sleep 1000",
        go.display(),
        late_file.display()
    );
    let server = json!({"command": "sh", "args": ["-c", wrapper]});
    let config = dir.path().join("slow.json");
    std::fs::write(&config, json!({"mcpServers": {"slow": server}}).to_string()).unwrap();
    let mut b = serve(&db, &mock, &config, &[]);
    let deadline = Duration::from_secs(30);
    crate::support::wait_for("the server recorded", deadline, || {
        !recorded_seen(&db.path()).is_empty()
    });
    std::fs::write(&go, "").unwrap();
    let late = || -> Option<u32> {
        std::fs::read_to_string(&late_file)
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    crate::support::wait_for("its late start", deadline, || late().is_some());
    let late = late().unwrap();
    let started = start_ticks(late).unwrap();
    // Brain, alive, vouches for the group while the server has not answered.
    crate::support::wait_for("the record vouching for the late start", deadline, || {
        recorded_seen(&db.path())
            .iter()
            .any(|&seen| seen >= started)
    });

    b.child.kill().unwrap(); // SIGKILL
    b.child.wait().unwrap();
    assert!(alive(late), "nothing could signal it at once");
    let _again = serve(&db, &mock, &config, &[]);
    crate::support::wait_for("the late start killed", deadline, || !alive(late));
}
