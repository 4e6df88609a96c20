//! Tools (issue 17): what a tool step costs through brain next to calling the same MCP
//! server directly with brain's own client, and the prompt-cache share of a conversation
//! with two tool steps per turn next to the same conversation without tools. The release
//! `brain serve` runs as a process with the real server-everything (npm, over stdio; run
//! `.ci/mcp-deps` first) and `mock_llm` as the model.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use brain::tools::mcp::Server;
use brain::tools::mcp::stdio::{Spawn, StdioLink};
use serde_json::{Value, json};

use super::support::{Proc, Res, examples_dir, median, mock, ms, script, spawn, words};

const CALL_DEADLINE: Duration = Duration::from_secs(30);

fn everything() -> Res<PathBuf> {
    let entry = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !entry.exists() {
        return Err("server-everything is missing: run .ci/mcp-deps".into());
    }
    Ok(entry)
}

/// The release `brain serve` on a fresh database in `dir`, tools from `servers` (or off).
fn serve(dir: &Path, provider: &str, servers: Option<Value>) -> Res<Proc> {
    let brain = examples_dir()?
        .parent()
        .ok_or("no target directory")?
        .join("brain");
    let db = dir.join("bench.db");
    let mut args: Vec<String> = vec!["--db".into(), db.to_string_lossy().into_owned()];
    args.extend(
        [
            "--sync",
            "normal",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--distill",
            "off",
            "--titles",
            "off",
            "--provider-url",
            provider,
        ]
        .map(String::from),
    );
    match servers {
        Some(s) => {
            let config = dir.join("mcp.json");
            std::fs::write(&config, json!({"mcpServers": s}).to_string())?;
            args.push("--mcp-config".into());
            args.push(config.to_string_lossy().into_owned());
        }
        None => args.extend(["--tools".into(), "off".into()]),
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    spawn(brain, &refs)
}

fn post(url: &str, body: &Value) -> Res<String> {
    let resp = ureq::post(url)
        .header("Content-Type", "application/json")
        .send(body.to_string())?;
    let mut text = String::new();
    resp.into_body().into_reader().read_to_string(&mut text)?;
    Ok(text)
}

fn get(url: &str) -> Res<Value> {
    let text = ureq::get(url).call()?.into_body().read_to_string()?;
    Ok(serde_json::from_str(&text)?)
}

fn new_session(brain: &Proc) -> Res<String> {
    let v: Value = serde_json::from_str(&post(&format!("{}/v1/sessions", brain.url), &json!({}))?)?;
    Ok(v["id"].as_str().ok_or("no session id")?.to_owned())
}

/// Sends one message and reads the stream to its end; fails unless it completed.
fn send(brain: &Proc, id: &str, message: &str) -> Res<()> {
    let text = post(
        &format!("{}/v1/sessions/{id}/messages", brain.url),
        &json!({"message": message}),
    )?;
    if !text.contains("\"status\":\"completed\"") {
        return Err(format!("the turn did not complete: {text}").into());
    }
    Ok(())
}

fn echo(id: &str, message: &str) -> Value {
    json!({"id": id, "name": "e__echo", "arguments": json!({"message": message}).to_string()})
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

pub fn run(args: &[String]) -> Res<()> {
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(50);
    let entry = everything()?;
    overhead(&entry, n)?;
    println!();
    cache_share(&entry, 30)
}

/// (a) The time from the end of the model's step that asks for `echo` to the arrival of
/// the next step's request (mock_llm's clock, whole ms: the mean of N is sub-ms), next to
/// the same call through brain's MCP client straight to its own server-everything.
fn overhead(entry: &Path, n: usize) -> Res<()> {
    let how = Spawn {
        command: "node".into(),
        args: vec![entry.to_string_lossy().into_owned(), "stdio".into()],
        ..Spawn::default()
    };
    let direct = Server::initialize(
        Box::new(StdioLink::spawn("e", &how, &Default::default())?),
        Instant::now() + CALL_DEADLINE,
    )?;
    let never = AtomicBool::new(false);

    let m = mock(&[])?;
    let dir = tempfile::tempdir()?;
    let servers = json!({"e": {"command": "node", "args": [entry, "stdio"], "allow": ["echo"]}});
    let brain = serve(dir.path(), &m.url, Some(servers))?;
    let id = new_session(&brain)?;
    let root = m.url.trim_end_matches("/v1");

    let (mut direct_ms, mut gaps, mut turns) = (Vec::new(), Vec::new(), Vec::new());
    // One warm-up of each, then both interleaved call by call.
    for i in 0..=n {
        let message = words(8, i);
        let t = Instant::now();
        let r = direct.call(
            "echo",
            json!({"message": message}),
            Instant::now() + CALL_DEADLINE,
            &never,
        )?;
        let took = t.elapsed();
        if r.is_error {
            return Err(format!("echo failed: {}", r.text).into());
        }
        script(
            &m,
            &json!([
                {"kind": "stream", "tool_calls": [echo(&format!("c{i}"), &message)]},
                {"kind": "stream", "text": "ok"},
            ]),
        )?;
        let t = Instant::now();
        send(&brain, &id, &format!("echo {message}"))?;
        let turn = t.elapsed();
        let requests = get(&format!("{root}/_mock/requests"))?;
        let streamed: Vec<&Value> = requests
            .as_array()
            .ok_or("no requests")?
            .iter()
            .filter(|r| r["stream"] == true)
            .collect();
        let [.., asked, next] = streamed.as_slice() else {
            return Err("fewer than two model requests".into());
        };
        let gap = next["_arrived_ms"].as_f64().unwrap_or(f64::NAN)
            - asked["_ended_ms"].as_f64().unwrap_or(f64::NAN);
        if i > 0 {
            direct_ms.push(ms(took));
            gaps.push(gap);
            turns.push(turn);
        }
    }
    let mut d: Vec<Duration> = direct_ms
        .iter()
        .map(|m| Duration::from_secs_f64(m / 1000.0))
        .collect();
    let mut sorted = gaps.clone();
    sorted.sort_by(f64::total_cmp);
    println!("tool step overhead, server-everything `echo` over stdio, {n} calls each");
    println!("| path | median ms | mean ms |");
    println!("|---|---|---|");
    println!(
        "| brain's MCP client, straight to the server | {:.2} | {:.2} |",
        ms(median(&mut d)),
        mean(&direct_ms)
    );
    println!(
        "| through brain: end of the step asking → next step's request | {:.0} | {:.2} |",
        sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN),
        mean(&gaps)
    );
    println!(
        "| (the whole turn, two model steps, seen by the client) | {:.2} | |",
        ms(median(&mut turns))
    );
    println!(
        "\nbrain's own part of a tool step (mean gap − mean direct call): {:.2} ms",
        mean(&gaps) - mean(&direct_ms)
    );
    Ok(())
}

/// (b) A 30-turn conversation whose every turn has two tool steps before the answer,
/// next to the same messages and answers without tools: the share of prompt tokens the
/// (mock) provider served from its prefix cache.
fn cache_share(entry: &Path, turns: usize) -> Res<()> {
    let servers = json!({"e": {"command": "node", "args": [entry, "stdio"], "allow": ["echo"]}});
    println!("prompt-cache share over {turns} turns (mock_llm's cached_tokens / prompt tokens)");
    println!("| conversation | model requests | prompt tokens | from the cache | share |");
    println!("|---|---|---|---|---|");
    for with_tools in [true, false] {
        let m = mock(&[])?;
        let dir = tempfile::tempdir()?;
        let brain = serve(dir.path(), &m.url, with_tools.then(|| servers.clone()))?;
        let id = new_session(&brain)?;
        for i in 0..turns {
            let answer = json!({"kind": "stream", "text": words(150, i)});
            let steps = if with_tools {
                json!([
                    {"kind": "stream", "tool_calls": [echo(&format!("a{i}"), &words(20, i + 500))]},
                    {"kind": "stream", "tool_calls": [echo(&format!("b{i}"), &words(20, i + 700))]},
                    answer,
                ])
            } else {
                json!([answer])
            };
            script(&m, &steps)?;
            send(&brain, &id, &words(40, i + 1000))?;
        }
        let usage = get(&format!("{}/v1/usage?session_id={id}", brain.url))?;
        let chat = &usage["by_purpose"]["chat"];
        let cached = chat["cache_read_tokens"].as_u64().unwrap_or(0);
        let input = chat["input_tokens"].as_u64().unwrap_or(0);
        println!(
            "| {} | {} | {} | {} | {:.1}% |",
            if with_tools {
                "2 tool steps per turn"
            } else {
                "no tools"
            },
            chat["calls"],
            cached + input,
            cached,
            100.0 * cached as f64 / (cached + input).max(1) as f64
        );
    }
    Ok(())
}
