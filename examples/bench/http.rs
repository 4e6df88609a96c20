//! HTTP throughput of the real release binary, measured by `wrk` (Debian's package) at 16
//! connections: `GET /v1/sessions` (50 sessions a page) next to `GET /health` in the same
//! run.

use std::process::Command;

use brain::session::{Store, StoreOptions};

use super::support::{Res, examples_dir, mock, spawn};

/// Requests per second `wrk` reports for `url`.
fn wrk(url: &str, seconds: u32) -> Res<f64> {
    let out = Command::new("wrk")
        .args(["-t2", "-c16", &format!("-d{seconds}s"), url])
        .output()
        .map_err(|e| format!("wrk is needed (apt-get install wrk): {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("Requests/sec:"))
        .ok_or_else(|| format!("no rate in wrk's output: {text}"))?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .ok_or("bad wrk line")?
        .parse()?)
}

pub fn run() -> Res<()> {
    let bin = examples_dir()?
        .parent()
        .ok_or("no target dir")?
        .join("brain");
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("b.db");
    {
        let store = Store::open(&db, StoreOptions::default())?;
        for i in 0..60 {
            store.create_session(Some(format!("Session {i}")), String::new())?;
        }
    }
    let m = mock(&[])?;
    let server = spawn(
        bin,
        &[
            "--db",
            db.to_str().ok_or("path")?,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--provider-url",
            &m.url,
        ],
    )?;
    let list = wrk(&format!("{}/v1/sessions?limit=50", server.url), 5)?;
    let health = wrk(&format!("{}/health", server.url), 5)?;
    println!("| route (wrk -t2 -c16 -d5s) | requests/s |");
    println!("|---|---|");
    println!("| GET /v1/sessions?limit=50 | {list:.0} |");
    println!("| GET /health | {health:.0} |");
    println!("\nlist / health: {:.2}", list / health);
    Ok(())
}
