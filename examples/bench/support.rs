//! What the benchmarks share: the binaries next to this one, a median, a mock LLM process.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// `target/<profile>/examples`, where this benchmark and `mock_llm` live.
pub fn examples_dir() -> Res<PathBuf> {
    let exe = std::env::current_exe()?;
    Ok(exe.parent().ok_or("no parent directory")?.to_owned())
}

/// A child process killed on drop.
pub struct Proc {
    pub child: Child,
    /// The first word-separated URL it printed (`http://…`).
    pub url: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a program that prints its URL on its first line.
pub fn spawn(bin: PathBuf, args: &[&str]) -> Res<Proc> {
    if !bin.exists() {
        return Err(format!(
            "{} is missing: build it first (cargo build --release --bins --examples)",
            bin.display()
        )
        .into());
    }
    let mut child = Command::new(&bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .ok_or_else(|| format!("no URL in {line:?}"))?
        .to_owned();
    Ok(Proc { child, url })
}

pub fn mock(args: &[&str]) -> Res<Proc> {
    let mut all = vec!["--port", "0"];
    all.extend_from_slice(args);
    spawn(examples_dir()?.join("mock_llm"), &all)
}

/// Queues a scripted step on a mock.
pub fn script(mock: &Proc, step: &serde_json::Value) -> Res<()> {
    let root = mock.url.trim_end_matches("/v1");
    ureq::post(&format!("{root}/_mock/script"))
        .header("Content-Type", "application/json")
        .send(step.to_string())?;
    Ok(())
}

pub fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `n` words of plain English-ish text (about one o200k token a word), different for each
/// seed: drawn from 64 words by a seeded xorshift, so two messages share no long run by
/// chance (which would flatter any prefix cache).
pub fn words(n: usize, seed: usize) -> String {
    const W: [&str; 64] = [
        "river", "garden", "budget", "window", "letter", "morning", "station", "number", "planet",
        "market", "pencil", "winter", "castle", "bridge", "summer", "doctor", "apple", "orange",
        "engine", "forest", "island", "harbor", "valley", "mirror", "candle", "ladder", "rocket",
        "basket", "camera", "cotton", "dragon", "feather", "glacier", "hammer", "jacket", "kettle",
        "lantern", "magnet", "needle", "oyster", "parrot", "quartz", "ribbon", "saddle", "tunnel",
        "umbrella", "violin", "walnut", "yellow", "zebra", "anchor", "bottle", "cactus", "desert",
        "empire", "falcon", "guitar", "helmet", "igloo", "jungle", "koala", "lemon", "meadow",
        "nectar",
    ];
    let mut x = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            W[(x % 64) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}
