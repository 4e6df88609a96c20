//! Import throughput and memory (issue 20): a generated ChatGPT `conversations.json` of
//! MESSAGES messages imported by the release binary, first into an empty database, then
//! again (everything unchanged). Two shapes: many conversations of 100 messages, and one
//! conversation holding them all (memory follows the largest conversation, not the file).
//! Peak RSS is the child's `ru_maxrss`.

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use super::support::{Res, examples_dir, words};

/// Messages per conversation in the "many" shape.
const PER_CONVERSATION: usize = 100;

/// Writes the export: `conversations` conversations of `per` messages, user and assistant
/// alternating, every tenth answer regenerated once (a branch).
fn generate(path: &std::path::Path, conversations: usize, per: usize) -> Res<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(b"[")?;
    for c in 0..conversations {
        let mut mapping = serde_json::Map::new();
        let mut parent: Option<String> = None;
        for i in 0..per {
            let id = format!("c{c}-m{i}");
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let node = |text: String| {
                json!({"id": id, "parent": parent, "children": [],
                       "message": {"author": {"role": role}, "create_time": 1.7e9 + (c * per + i) as f64,
                                   "content": {"content_type": "text", "parts": [text]},
                                   "metadata": {"model_slug": "gpt-4o"}}})
            };
            if role == "assistant" && i % 20 == 1 {
                let alt = format!("{id}-alt");
                let mut v = node(words(30, i + 7));
                v["id"] = json!(alt);
                mapping.insert(alt, v);
            }
            mapping.insert(id.clone(), node(words(30, c * per + i)));
            parent = Some(id);
        }
        let conv = json!({"id": format!("conv-{c}"), "title": format!("Conversation {c}"),
                          "create_time": 1.7e9 + (c * per) as f64, "mapping": mapping,
                          "current_node": parent});
        if c > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut out, &conv)?;
    }
    out.write_all(b"]")?;
    out.flush()?;
    Ok(())
}

/// Runs one import; its wall time and the child's peak RSS in KiB.
fn import(
    bin: &std::path::Path,
    db: &std::path::Path,
    file: &std::path::Path,
) -> Res<(Duration, u64, String)> {
    let started = Instant::now();
    let out = Command::new(bin)
        .arg("--db")
        .arg(db)
        .args(["--sync", "normal", "sessions", "import"])
        .arg(file)
        .output()?;
    let took = started.elapsed();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    Ok((
        took,
        peak_rss_kib(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

/// The largest resident set of any child waited for so far (Linux: KiB).
fn peak_rss_kib() -> u64 {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a live rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    usage.ru_maxrss as u64
}

pub fn run(args: &[String]) -> Res<()> {
    let messages: usize = args
        .first()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let bin = examples_dir()?
        .parent()
        .ok_or("no target dir")?
        .join("brain");
    if !bin.exists() {
        return Err(format!("{} missing: cargo build --release", bin.display()).into());
    }
    // The "one" shape runs second: ru_maxrss only grows, so each figure is that run's
    // peak only if it is the larger; the many-conversations figure is taken first.
    for (shape, conversations, per) in [
        ("many", messages / PER_CONVERSATION, PER_CONVERSATION),
        ("one", 1, messages),
    ] {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("conversations.json");
        generate(&file, conversations, per)?;
        let size = std::fs::metadata(&file)?.len();
        let db = dir.path().join("b.db");
        let (first, rss, report) = import(&bin, &db, &file)?;
        let (again, _, report2) = import(&bin, &db, &file)?;
        let total = (messages + messages / 20) as f64;
        println!(
            "{shape}: {conversations} conversation(s), {} MiB file; first import {:.2} s ({:.0} messages/s), \
             peak RSS {:.1} MiB; again (unchanged) {:.2} s ({:.0} messages/s)",
            size / (1 << 20),
            first.as_secs_f64(),
            total / first.as_secs_f64(),
            rss as f64 / 1024.0,
            again.as_secs_f64(),
            total / again.as_secs_f64(),
        );
        print!("  {report}  {report2}");
    }
    Ok(())
}
