//! The tool registry (SPEC §13) against real MCP servers: npm's server-filesystem and
//! server-everything (skipped visibly without `.ci/mcp-deps`), and tests/mcp/stand_in.py
//! for the faults a reference server cannot be asked for (a crash mid-call, a changed
//! list). Both in-process (`Tools`) and through `brain serve` and `brain tools`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use brain::tools::config::parse;
use brain::tools::mcp::LinkOptions;
use brain::tools::registry::START_WAIT;
use brain::tools::{Health, Mode, Policy, ServerState, ToolStatus, Tools, ToolsSetup};
use serde_json::{Value, json};

use crate::mcp::npm_server;
use crate::server::agent;
use crate::support::{TempDb, serve_command, spawn_serve, user};

const DEADLINE: Duration = Duration::from_secs(30);
/// No provider listens here: these tests never chat.
const NO_PROVIDER: &str = "http://127.0.0.1:9/v1";

fn soon() -> Instant {
    Instant::now() + DEADLINE
}

fn never() -> AtomicBool {
    AtomicBool::new(false)
}

fn stand_in(tools: &str, pidfile: Option<&Path>) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/stand_in.py");
    let mut env = json!({"STAND_IN_TOOLS": tools});
    if let Some(p) = pidfile {
        env["STAND_IN_PIDFILE"] = json!(p);
    }
    json!({"command": "python3", "args": [script], "env": env})
}

/// server-filesystem on `dir`, `move_file` denied; `None` (a visible skip) without it.
fn filesystem(test: &str, dir: &Path) -> Option<Value> {
    let entry = npm_server(test, "server-filesystem")?;
    Some(json!({"command": "node", "args": [entry, dir], "deny": ["move_file"]}))
}

fn everything(test: &str) -> Option<Value> {
    let entry = npm_server(test, "server-everything")?;
    Some(json!({"command": "node", "args": [entry, "stdio"]}))
}

fn start(servers: Value) -> Tools {
    try_start(servers).unwrap()
}

fn try_start(servers: Value) -> Result<Tools, brain::tools::ToolsError> {
    let config = parse(&json!({"mcpServers": servers}).to_string()).unwrap();
    Tools::start(ToolsSetup {
        mode: Mode::Auto,
        config: Some(config),
        tool_timeout: DEADLINE,
        store: None,
        start_wait: START_WAIT,
        links: LinkOptions::default(),
    })
}

/// Waits for `cond` with a generous deadline.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let until = soon();
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn write_config(dir: &Path, servers: Value) -> PathBuf {
    let path = dir.join("mcp.json");
    std::fs::write(&path, json!({"mcpServers": servers}).to_string()).unwrap();
    path
}

fn get(url: &str, path: &str) -> Value {
    let resp = agent().get(format!("{url}{path}")).call().unwrap();
    assert_eq!(resp.status(), 200);
    serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap()
}

fn tool<'a>(listing: &'a Value, name: &str) -> Option<&'a Value> {
    listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
}

/// The pids of a process's children (Linux's /proc), for checking they end with it.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        // A thread that ended since the listing has no list (its children, if any, went
        // to a thread still listed).
        let Ok(text) = std::fs::read_to_string(task.unwrap().path().join("children")) else {
            continue;
        };
        out.extend(text.split_whitespace().map(|p| p.parse::<u32>().unwrap()));
    }
    out
}

/// Whether a process exists (a zombie not yet reaped counts as gone).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn sigterm(child: &mut std::process::Child) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let until = soon();
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "brain did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_api_lists_real_tools_with_their_policies_and_the_servers_end_with_brain() {
    let test = "tools_registry::the_api_lists_real_tools_with_their_policies_and_the_servers_end_with_brain";
    let dir = tempfile::tempdir().unwrap();
    let (Some(fs), Some(every)) = (filesystem(test, dir.path()), everything(test)) else {
        return;
    };
    let pids = dir.path().join("pids");
    let config = write_config(
        dir.path(),
        json!({"filesystem": fs, "everything": every, "stand": stand_in("echo", Some(&pids))}),
    );
    let db = TempDb::new();
    let (mut brain, url) = spawn_serve(
        serve_command(&db, NO_PROVIDER)
            .arg("--mcp-config")
            .arg(&config),
    );
    // serve waits 10 s for its servers; on a loaded machine one may still be starting.
    wait_for("every server to be up", || {
        get(&url, "/v1/tools")["servers"]
            .as_array()
            .is_some_and(|all| all.iter().all(|s| s["status"] == "ok"))
    });
    let listing = get(&url, "/v1/tools");
    let write = tool(&listing, "filesystem__write_file").unwrap();
    assert_eq!(write["policy"], "ask", "{write}");
    assert_eq!(write["read_only"], false);
    assert_eq!(write["server"], "filesystem");
    let read = tool(&listing, "filesystem__read_text_file").unwrap();
    assert_eq!(read["policy"], "allow", "{read}");
    assert_eq!(read["read_only"], true);
    // Denied: shown with its policy (SPEC §7), never offered (the in-process test).
    assert_eq!(
        tool(&listing, "filesystem__move_file").unwrap()["policy"],
        "deny"
    );
    assert_eq!(tool(&listing, "search_history").unwrap()["policy"], "allow");
    assert!(tool(&listing, "everything__echo").is_some(), "{listing}");
    let names: Vec<&str> = listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    for s in listing["servers"].as_array().unwrap() {
        assert_eq!(s["status"], "ok", "{s}");
        assert!(s["tools"].as_u64().unwrap() >= 1, "{s}");
        assert!(s.get("error").is_none());
    }
    assert_eq!(get(&url, "/health")["tools"], "ok");

    // Every server brain started is its child; SIGTERM ends them all.
    let servers = children(brain.id());
    assert!(servers.len() >= 3, "{servers:?}");
    let stand_pid: u32 = std::fs::read_to_string(&pids)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(servers.contains(&stand_pid));
    sigterm(&mut brain);
    wait_for("the servers to end", || servers.iter().all(|p| !alive(*p)));
}

#[test]
fn brain_tools_list_and_call_read_the_configuration_like_serve() {
    let test = "tools_registry::brain_tools_list_and_call_read_the_configuration_like_serve";
    let dir = tempfile::tempdir().unwrap();
    let Some(fs) = filesystem(test, dir.path()) else {
        return;
    };
    let config = write_config(dir.path(), json!({"filesystem": fs}));
    let db = TempDb::new();
    let brain = |args: &[&str]| -> Output {
        Command::new(env!("CARGO_BIN_EXE_brain"))
            .arg("--db")
            .arg(db.path())
            .arg("tools")
            .args(args)
            .arg("--mcp-config")
            .arg(&config)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let list = brain(&["list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{list:?}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_owned()
    };
    assert!(line("filesystem__write_file").contains(" ask"), "{text}");
    assert!(
        line("filesystem__read_text_file").contains("allow  read-only"),
        "{text}"
    );
    assert!(line("search_history").contains("builtin"), "{text}");
    assert!(text.contains("server filesystem: ok, "), "{text}");
    let json_list = brain(&["list", "--json"]);
    let v: Value = serde_json::from_slice(&json_list.stdout).unwrap();
    assert_eq!(v["servers"][0]["name"], "filesystem");

    let file = dir.path().join("from-cli.txt");
    let args = json!({"path": file, "content": "written by brain tools call\n"}).to_string();
    let wrote = brain(&["call", "filesystem__write_file", &args]);
    assert!(wrote.status.success(), "{wrote:?}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "written by brain tools call\n"
    );
    let read = brain(&[
        "call",
        "filesystem__read_text_file",
        &json!({"path": file}).to_string(),
    ]);
    assert!(String::from_utf8_lossy(&read.stdout).contains("written by brain tools call"));
    // The tool refuses (outside its directory): a failure, with its reason, exit code 1.
    let refused = brain(&[
        "call",
        "filesystem__read_text_file",
        r#"{"path": "/etc/hostname"}"#,
    ]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("ended error") && err.to_lowercase().contains("denied"),
        "{err}"
    );
    for (args, want) in [
        (vec!["call", "nope__x", "{}"], "no tool named"),
        (
            vec!["call", "filesystem__write_file", "{not json"],
            "not JSON",
        ),
        (vec!["call", "filesystem__write_file", "[1]"], "JSON object"),
    ] {
        let out = brain(&args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn a_missing_server_is_failed_with_its_error_and_the_others_work() {
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({
        "gone": {"command": "/nonexistent/mcp-server"},
        "stand": stand_in("echo", None),
    });
    let config = write_config(dir.path(), servers.clone());
    let db = TempDb::new();
    let (mut brain, url) = spawn_serve(
        serve_command(&db, NO_PROVIDER)
            .arg("--mcp-config")
            .arg(&config),
    );
    let listing = get(&url, "/v1/tools");
    let gone = &listing["servers"][0];
    assert_eq!(gone["name"], "gone");
    assert_eq!(gone["status"], "failed");
    assert!(
        gone["error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/mcp-server"),
        "{gone}"
    );
    assert_eq!(listing["servers"][1]["status"], "ok");
    assert!(tool(&listing, "stand__echo").is_some());
    let health = get(&url, "/health");
    assert_eq!(health["tools"], "degraded");
    assert_eq!(health["status"], "degraded");
    sigterm(&mut brain);

    let tools = start(servers);
    let echo = tools.call("stand__echo", &json!({"x": 1}), soon(), &never());
    assert_eq!(echo.status, ToolStatus::Ok, "{echo:?}");
    assert_eq!(echo.text, r#"echo {"x": 1}"#);
    assert_eq!(tools.status().health, Health::Degraded);
    assert_eq!(tools.status().servers[0].status, ServerState::Failed);
}

#[test]
fn a_server_that_crashes_mid_call_fails_that_call_and_the_next_call_restarts_it() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let tools = start(json!({"stand": stand_in("echo,crash", Some(&pids))}));
    let crashed = tools.call("stand__crash", &json!({}), soon(), &never());
    assert_eq!(crashed.status, ToolStatus::Error, "{crashed:?}");
    assert!(
        crashed.text.contains("stand") && crashed.text.contains("gone"),
        "{crashed:?}"
    );
    let echo = tools.call("stand__echo", &json!({"n": 2}), soon(), &never());
    assert_eq!(echo.status, ToolStatus::Ok, "{echo:?}");
    assert_eq!(std::fs::read_to_string(&pids).unwrap().lines().count(), 2);
    assert_eq!(tools.status().servers[0].status, ServerState::Ok);
}

#[test]
fn a_hanging_tool_times_out_at_its_servers_timeout_and_the_server_stays_usable() {
    let test = "tools_registry::a_hanging_tool_times_out_at_its_servers_timeout_and_the_server_stays_usable";
    let Some(mut every) = everything(test) else {
        return;
    };
    every["timeout_s"] = json!(1);
    let tools = start(json!({"everything": every}));
    assert_eq!(tools.timeout("everything__echo"), Duration::from_secs(1));
    let started = Instant::now();
    let slow = tools.call(
        "everything__trigger-long-running-operation",
        &json!({"duration": 30, "steps": 3}),
        soon(),
        &never(),
    );
    assert_eq!(slow.status, ToolStatus::Timeout, "{slow:?}");
    assert_eq!(slow.text, "the tool did not answer in 1 s");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let echo = tools.call(
        "everything__echo",
        &json!({"message": "still here"}),
        soon(),
        &never(),
    );
    assert_eq!(echo.status, ToolStatus::Ok, "{echo:?}");
    assert!(echo.text.contains("still here"));

    // Cancelled before it runs: ends as cancelled.
    let stop = AtomicBool::new(true);
    let c = tools.call("everything__echo", &json!({"message": "x"}), soon(), &stop);
    assert_eq!(c.status, ToolStatus::Cancelled, "{c:?}");
}

#[test]
fn tools_whose_names_collide_after_sanitising_refuse_startup_naming_both() {
    let servers = json!({"x.y": stand_in("echo", None), "x_y": stand_in("echo", None)});
    let e = try_start(servers.clone()).unwrap_err().to_string();
    assert!(
        e.contains("x.y/echo") && e.contains("x_y/echo") && e.contains("x_y__echo"),
        "{e}"
    );
    // In one server too, and against the built-in.
    let e = try_start(json!({"s": stand_in("a.b,a_b", None)}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("s/a.b") && e.contains("s/a_b"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), servers);
    let db = TempDb::new();
    let out = serve_command(&db, NO_PROVIDER)
        .arg("--mcp-config")
        .arg(&config)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("x.y/echo") && err.contains("x_y/echo"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "it must not have served");
}

#[test]
fn a_changed_list_is_taken_and_a_new_collision_drops_only_the_newer_tool() {
    let tools = start(json!({"s": stand_in("echo,do_it,add_tool", None)}));
    let added = tools.call("s__add_tool", &json!({"name": "fresh"}), soon(), &never());
    assert_eq!(added.status, ToolStatus::Ok);
    wait_for("the changed list", || tools.find("s__fresh").is_some());
    tools.call("s__add_tool", &json!({"name": "do.it"}), soon(), &never());
    tools.call("s__add_tool", &json!({"name": "later"}), soon(), &never());
    wait_for("the second change", || tools.find("s__later").is_some());
    // `do.it` would be offered as s__do_it, which do_it already is: do_it keeps it.
    assert_eq!(tools.find("s__do_it").unwrap().tool, "do_it");
    let names: Vec<String> = tools.offered().into_iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "s__add_tool",
            "s__do_it",
            "s__echo",
            "s__fresh",
            "s__later",
            "search_history"
        ]
    );
}

#[test]
fn denied_tools_are_never_offered_nor_called() {
    let mut stand = stand_in("echo,rm", None);
    stand["deny"] = json!(["rm"]);
    stand["allow"] = json!(["echo"]);
    let tools = start(json!({"s": stand}));
    let offered = tools.offered();
    assert!(offered.iter().all(|t| t.name != "s__rm"), "{offered:?}");
    assert_eq!(tools.find("s__echo").unwrap().policy, Policy::Allow);
    assert!(tools.find("s__rm").is_none());
    let rm = tools.call("s__rm", &json!({}), soon(), &never());
    assert_eq!(rm.status, ToolStatus::Error);
    let status = tools.status();
    let rm = status.tools.iter().find(|t| t.name == "s__rm").unwrap();
    assert_eq!(rm.policy, Policy::Deny);
}

#[test]
fn tools_off_offers_nothing_and_starts_no_server() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let config = write_config(dir.path(), json!({"stand": stand_in("echo", Some(&pids))}));
    let db = TempDb::new();
    let (mut brain, url) = spawn_serve(
        serve_command(&db, NO_PROVIDER)
            .arg("--mcp-config")
            .arg(&config)
            .args(["--tools", "off"]),
    );
    assert_eq!(get(&url, "/v1/tools"), json!({"tools": [], "servers": []}));
    assert_eq!(get(&url, "/health")["tools"], "off");
    sigterm(&mut brain);
    assert!(!pids.exists(), "a server was started");
    // And without a configuration, `auto` is off too.
    let (mut brain, url) = spawn_serve(&mut serve_command(&db, NO_PROVIDER));
    assert_eq!(get(&url, "/health")["tools"], "off");
    sigterm(&mut brain);
}

#[test]
fn search_history_finds_earlier_chats() {
    let db = TempDb::new();
    let store = Arc::new(db.open());
    let id = store.create_session(None, String::new()).unwrap().id;
    store
        .append(id, &user("my cat is called Quasimodo"))
        .unwrap();
    let tools = Tools::start(ToolsSetup {
        mode: Mode::On,
        config: None,
        tool_timeout: DEADLINE,
        store: Some(Arc::clone(&store)),
        start_wait: START_WAIT,
        links: LinkOptions::default(),
    })
    .unwrap();
    let hit = tools.call(
        "search_history",
        &json!({"query": "quasimodo"}),
        soon(),
        &never(),
    );
    assert_eq!(hit.status, ToolStatus::Ok, "{hit:?}");
    assert!(
        hit.text.starts_with("1 earlier messages match")
            && hit.text.contains(&format!("session {id}, seq "))
            && hit.text.contains("Quasimodo"),
        "{hit:?}"
    );
    let none = tools.call(
        "search_history",
        &json!({"query": "zebra"}),
        soon(),
        &never(),
    );
    assert_eq!(none.text, "No earlier messages match \"zebra\".");
    let bad = tools.call(
        "search_history",
        &json!({"query": "x", "limit": 50}),
        soon(),
        &never(),
    );
    assert_eq!(bad.status, ToolStatus::Error);
    assert!(bad.text.contains("`limit`"), "{bad:?}");
}

#[test]
fn a_bad_configuration_stops_startup_naming_the_server_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let db = TempDb::new();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"mcpServers": {"fs": {"command": "x", "url": "http://h"}}}"#,
    )
    .unwrap();
    for (config, want) in [
        (bad, "server \"fs\": has both `command` and `url`"),
        (dir.path().join("missing.json"), "missing.json"),
    ] {
        let out = serve_command(&db, NO_PROVIDER)
            .arg("--mcp-config")
            .arg(&config)
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{err}");
    }
}

#[test]
fn a_slow_server_keeps_starting_in_the_background_and_a_late_collision_drops_its_tool() {
    let mut slow = stand_in("echo,only_slow", None);
    slow["env"]["STAND_IN_DELAY_S"] = json!("2");
    let config =
        parse(&json!({"mcpServers": {"x.y": stand_in("echo", None), "x_y": slow}}).to_string())
            .unwrap();
    let started = Instant::now();
    let tools = Tools::start(ToolsSetup {
        mode: Mode::Auto,
        config: Some(config),
        tool_timeout: DEADLINE,
        store: None,
        start_wait: Duration::from_millis(500),
        links: LinkOptions::default(),
    })
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let status = tools.status();
    // Less than its 2 s delay since it was spawned: the slow one is still starting.
    assert_eq!(status.servers[1].status, ServerState::Starting);
    assert!(tools.find("x_y__only_slow").is_none());
    // The fast one is up within the start wait, or soon after on a loaded machine.
    wait_for("the fast server", || {
        tools.status().servers[0].status == ServerState::Ok
    });
    assert_eq!(tools.status().health, Health::Ok);
    wait_for("the slow server", || tools.find("x_y__only_slow").is_some());
    assert_eq!(tools.status().servers[1].status, ServerState::Ok);
    // Its `echo` would be offered as x_y__echo, which x.y's already is: x.y keeps it.
    assert_eq!(tools.find("x_y__echo").unwrap().server, "x.y");
    let echo = tools.call("x_y__echo", &json!({}), soon(), &never());
    assert_eq!(echo.text, "echo {}");
}

/// A server gets only the environment its configuration names, plus PATH and HOME (SPEC
/// §12): never brain's API keys or token.
#[test]
fn a_server_sees_only_its_configured_environment() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = stand_in("env", None);
    server["env"]["GIVEN_TO_IT"] = json!("yes");
    let config = write_config(dir.path(), json!({"si": server}));
    let db = TempDb::new();
    let out = Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(db.path())
        .args(["tools", "call", "si__env", "{}", "--mcp-config"])
        .arg(&config)
        .env("OPENAI_API_KEY", "sk-secret")
        .env("BRAIN_API_TOKEN", "tok-secret")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let names: Vec<&str> = text.split_whitespace().collect();
    for wanted in ["GIVEN_TO_IT", "PATH", "HOME", "STAND_IN_TOOLS"] {
        assert!(names.contains(&wanted), "{wanted} missing: {text}");
    }
    for secret in ["OPENAI_API_KEY", "BRAIN_API_TOKEN"] {
        assert!(!names.contains(&secret), "{secret} leaked: {text}");
    }
}

/// A server that stops reading its input (and floods brain with requests meanwhile)
/// blocks no caller: the call ends at its timeout, closing the tools does not hang, and
/// the server is started again for the next call.
#[test]
fn a_server_that_stops_reading_its_input_blocks_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let mut server = stand_in("deaf,echo", Some(&pids));
    server["timeout_s"] = json!(1);
    let tools = start(json!({"si": server}));
    let started = Instant::now();
    let deaf = tools.call("si__deaf", &json!({}), soon(), &never());
    assert_eq!(deaf.status, ToolStatus::Timeout, "{deaf:?}");
    // Another call while it is deaf: ends by its own deadline too, never blocked.
    let next = tools.call(
        "si__echo",
        &json!({"n": 1}),
        Instant::now() + Duration::from_secs(2),
        &never(),
    );
    assert_ne!(next.status, ToolStatus::Ok, "{next:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // It is started again: a later call works.
    wait_for("a working server again", || {
        tools
            .call("si__echo", &json!({"n": 2}), soon(), &never())
            .status
            == ToolStatus::Ok
    });
    let closing = Instant::now();
    tools.shutdown();
    assert!(
        closing.elapsed() < Duration::from_secs(10),
        "{:?}",
        closing.elapsed()
    );
}

/// A server that is down keeps its tools offered (I3: the next turn's definitions are the
/// same, so the prompt cache holds; and a call of one is what starts it again, SPEC §13).
#[test]
fn a_server_that_is_down_keeps_its_tools_offered() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = stand_in("echo,crash", None);
    server["env"]["STAND_IN_START_ONCE"] = json!(dir.path().join("started"));
    let tools = start(json!({"stand": server}));
    let before: Vec<String> = tools.offered().into_iter().map(|t| t.name).collect();
    assert!(before.contains(&"stand__echo".to_owned()), "{before:?}");
    let crashed = tools.call("stand__crash", &json!({}), soon(), &never());
    assert_eq!(crashed.status, ToolStatus::Error, "{crashed:?}");
    wait_for("the restart to fail", || {
        tools.status().servers[0].status == ServerState::Failed
    });
    let after: Vec<String> = tools.offered().into_iter().map(|t| t.name).collect();
    assert_eq!(before, after);
    // Called while down: a clear error, not a hang.
    let echo = tools.call("stand__echo", &json!({}), soon(), &never());
    assert_eq!(echo.status, ToolStatus::Error, "{echo:?}");
}

/// A server listing more tools than brain offers is refused with a message saying how to
/// fix it, and the other servers work.
#[test]
fn a_server_listing_too_many_tools_is_refused() {
    let names: Vec<String> = (0..300).map(|i| format!("t{i}")).collect();
    let tools = start(json!({
        "many": stand_in(&names.join(","), None),
        "few": stand_in("echo", None),
    }));
    let status = tools.status();
    let many = status.servers.iter().find(|s| s.name == "many").unwrap();
    assert_eq!(many.status, ServerState::Failed, "{many:?}");
    assert!(
        many.error
            .as_deref()
            .unwrap_or_default()
            .contains("at most 256"),
        "{many:?}"
    );
    let echo = tools.call("few__echo", &json!({}), soon(), &never());
    assert_eq!(echo.status, ToolStatus::Ok, "{echo:?}");
}
