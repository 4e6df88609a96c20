//! The release binary's footprint: its size, the time from start to listening, and its
//! resident memory idle and after a first turn (Linux `/proc`).

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use serde_json::json;

use super::support::{Res, examples_dir, median, mock, ms, spawn};

fn rss_kib(pid: u32) -> Res<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS")?;
    Ok(line.split_whitespace().nth(1).ok_or("bad VmRSS")?.parse()?)
}

pub fn run() -> Res<()> {
    let bin = examples_dir()?
        .parent()
        .ok_or("no target dir")?
        .join("brain");
    let size = std::fs::metadata(&bin)
        .map_err(|_| format!("{} missing: cargo build --release", bin.display()))?
        .len();
    let m = mock(&[])?;
    let mut starts = Vec::new();
    for _ in 0..7 {
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("b.db");
        let started = Instant::now();
        let p = spawn(
            bin.clone(),
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
        starts.push(started.elapsed());
        drop(p);
    }
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("b.db");
    let p = spawn(
        bin.clone(),
        &[
            "--db",
            db.to_str().ok_or("path")?,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--provider-url",
            &m.url,
            "--distill",
            "off",
        ],
    )?;
    std::thread::sleep(Duration::from_millis(500));
    let idle = rss_kib(p.child.id())?;
    let s: serde_json::Value = serde_json::from_str(
        &ureq::post(&format!("{}/v1/sessions", p.url))
            .header("Content-Type", "application/json")
            .send("{}")?
            .into_body()
            .read_to_string()?,
    )?;
    let id = s["id"].as_str().ok_or("no id")?;
    let resp = ureq::post(&format!("{}/v1/sessions/{id}/messages", p.url))
        .header("Content-Type", "application/json")
        .send(json!({"message": "hello"}).to_string())?;
    for line in BufReader::new(resp.into_body().into_reader()).lines() {
        line?;
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = rss_kib(p.child.id())?;
    println!("| measure | value |");
    println!("|---|---|");
    println!("| stripped release binary | {:.1} MB |", size as f64 / 1e6);
    println!(
        "| start to listening (median of 7) | {:.1} ms |",
        ms(median(&mut starts))
    );
    println!("| RSS idle | {:.1} MiB |", idle as f64 / 1024.0);
    println!(
        "| RSS after the first turn | {:.1} MiB |",
        after as f64 / 1024.0
    );
    Ok(())
}
