//! `brain sessions import FILE|- [--from …]` (SPEC §15): through the shared import
//! (`crate::import::file`) in this process, or, when a server holds the database, sent to
//! it (`POST /v1/import`) as `chat` talks to it; either way with a progress bar when
//! standard error is a terminal, and the same report.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::term::{count, printable};
use super::{CliError, ImportFrom};
use crate::import::Source;
use crate::import::file::{
    Ask, FileError, MAX_UNZIPPED_BYTES, Progress, import_path, import_stdin,
};
use crate::session::Store;

static NEVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// In this process: this command holds the database's lock.
pub fn run(
    store: &Store,
    file: &Path,
    from: ImportFrom,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let name = file.display().to_string();
    let ask = Ask {
        from: source_of(from),
        name: &name,
        from_flag: "--from ",
        max_unzipped: MAX_UNZIPPED_BYTES,
        // Ctrl-C ends this process, and with it the transaction.
        stop: &NEVER,
    };
    let stdin = file.as_os_str() == "-";
    let size = (!stdin)
        .then(|| std::fs::metadata(file).ok().map(|m| m.len()))
        .flatten();
    let bar = progress(size);
    let mut tick = |p: Progress| show(&bar, p);
    let imported = if stdin {
        import_stdin(store, Box::new(std::io::stdin()), &ask, &mut tick)
    } else {
        import_path(store, file, &ask, &mut tick)
    };
    bar.finish_and_clear();
    let imported = imported.map_err(|e| match e {
        FileError::Io(source) => CliError::Input {
            path: file.to_owned(),
            source,
        },
        other => CliError::ImportFailed(printable(&other.to_string()).into_owned()),
    })?;
    write_report(out, &crate::api::views::imported(&imported))
}

/// The source `--from` names; `None` for `auto`.
fn source_of(from: ImportFrom) -> Option<Source> {
    match from {
        ImportFrom::Auto => None,
        ImportFrom::Brain => Some(Source::Brain),
        ImportFrom::Chatgpt => Some(Source::ChatGpt),
        ImportFrom::Claude => Some(Source::Claude),
        ImportFrom::Openwebui => Some(Source::OpenWebUi),
        ImportFrom::Llm => Some(Source::Llm),
    }
}

/// How long the server may take to begin its answer once the file is sent: it reads the
/// file before it answers (a progress line, or the report).
const SERVER_IMPORT_TIMEOUT: Duration = Duration::from_secs(600);

/// Sends the file to the server at `url` and prints its report.
pub fn on_server(
    url: &str,
    file: &Path,
    from: ImportFrom,
    token: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    if file.as_os_str() == "-" {
        return Err(CliError::ImportFailed(format!(
            "the brain server at {url} holds the database: give the file's path (it is \
             sent to the server), not standard input"
        )));
    }
    let input = std::fs::File::open(file).map_err(|source| CliError::Input {
        path: file.to_owned(),
        source,
    })?;
    let size = input.metadata().map(|m| m.len()).ok();
    let failed = |e: &dyn std::fmt::Display| {
        CliError::Serve(format!(
            "the brain server at {url} holds the database, but: {e}"
        ))
    };
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(10)))
        .timeout_recv_response(Some(SERVER_IMPORT_TIMEOUT))
        .build()
        .new_agent();
    let mut address = format!("{}/v1/import", url.trim_end_matches('/'));
    if let Some(s) = source_of(from) {
        address.push_str(&format!("?from={}", s.name()));
    }
    let mut request = agent
        .post(&address)
        .header("Content-Type", "application/octet-stream")
        .header("Accept", "application/x-ndjson");
    if let Some(n) = size {
        // The server needs the length up front: it refuses more than its limit unread.
        request = request.header("Content-Length", &n.to_string());
    }
    if let Some(t) = token {
        request = request.header("Authorization", &format!("Bearer {t}"));
    }
    let bar = progress(size);
    let sent = Sent {
        inner: input,
        bar: bar.clone(),
    };
    let resp = request
        .send(ureq::SendBody::from_owned_reader(sent))
        .map_err(|e| failed(&e))?;
    let status = resp.status().as_u16();
    let last = last_line(resp, &bar).map_err(|e| failed(&e))?;
    bar.finish_and_clear();
    match last.get("report") {
        Some(report) if status == 200 => write_report(out, report),
        _ => {
            let why = last["message"]
                .as_str()
                .unwrap_or("it answered nothing readable");
            Err(CliError::ImportFailed(format!(
                "the server at {url}: {}",
                printable(why)
            )))
        }
    }
}

/// The answer's last JSON line (the report, or an error; a plain answer is one line),
/// showing the progress lines before it on the bar.
fn last_line(
    resp: ureq::http::Response<ureq::Body>,
    bar: &indicatif::ProgressBar,
) -> std::io::Result<Value> {
    let mut last = Value::Null;
    for line in BufReader::new(resp.into_body().into_reader()).lines() {
        let Ok(v) = serde_json::from_str::<Value>(&line?) else {
            continue;
        };
        match v.get("progress") {
            Some(p) => bar.set_message(count(
                p["conversations"].as_u64().unwrap_or(0),
                "conversation",
            )),
            None => last = v,
        }
    }
    Ok(last)
}

/// Counts the bytes sent on the progress bar.
struct Sent {
    inner: std::fs::File,
    bar: indicatif::ProgressBar,
}

impl std::io::Read for Sent {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

fn show(bar: &indicatif::ProgressBar, p: Progress) {
    bar.set_position(p.bytes);
    bar.set_message(count(p.conversations as u64, "conversation"));
}

/// A bar of bytes when the size is known and standard error is a terminal; nothing
/// otherwise.
fn progress(size: Option<u64>) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = match size {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::new_spinner(),
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:30} {bytes}/{total_bytes} · {msg} · {elapsed}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// The report (SPEC §15), from its JSON view (`api::views::imported`, what the server
/// answers too): sessions created, extended, unchanged and forked; messages; what was
/// left out; time.
fn write_report(out: &mut dyn Write, r: &Value) -> Result<(), CliError> {
    let n = |k: &str| r[k].as_u64().unwrap_or(0);
    let text = |v: &Value| printable(v.as_str().unwrap_or_default()).into_owned();
    if let Some(what) = r["nothing"].as_str() {
        writeln!(out, "nothing to import: {}", printable(what))?;
        return Ok(());
    }
    if r["source"] == "brain" {
        writeln!(
            out,
            "imported {} ({}): {} created, {} extended, {} unchanged",
            count(n("sessions"), "session"),
            count(n("events"), "event"),
            n("created"),
            n("extended"),
            n("unchanged")
        )?;
        return Ok(());
    }
    let empty = Vec::new();
    let forked = r["forked"].as_array().unwrap_or(&empty);
    writeln!(
        out,
        "imported {} from {}: {} created, {} extended, {} unchanged, {} forked; {}",
        count(n("conversations"), "conversation"),
        text(&r["source"]),
        n("created"),
        n("extended"),
        n("unchanged"),
        forked.len(),
        count(n("messages"), "message")
    )?;
    if let Some(skipped) = r["skipped"].as_object().filter(|s| !s.is_empty()) {
        let parts: Vec<String> = skipped
            .iter()
            .map(|(k, v)| format!("{} {k}", v.as_u64().unwrap_or(0)))
            .collect();
        writeln!(out, "left out: {}", printable(&parts.join(", ")))?;
    }
    for f in forked {
        writeln!(
            out,
            "forked: {}{} differs from its earlier import; the new version is session {} \
             (a fork of {} at #{})",
            text(&f["conversation"]),
            f["title"]
                .as_str()
                .map(|t| format!(" “{}”", printable(t)))
                .unwrap_or_default(),
            text(&f["id"]),
            text(&f["from"]),
            f["seq"].as_u64().unwrap_or(0)
        )?;
    }
    writeln!(
        out,
        "took {:.2} s (the database's writer held {:.2} s)",
        r["elapsed_s"].as_f64().unwrap_or(0.0),
        r["writer_held_s"].as_f64().unwrap_or(0.0)
    )?;
    Ok(())
}
