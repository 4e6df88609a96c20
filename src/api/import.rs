//! `POST /v1/import[?from=chatgpt|claude|openwebui|brain|llm]` (SPEC §15 through the
//! running server): the export is the raw body, kept in a temporary file while it is read
//! (`upload.rs`; a zip needs to seek, llm's `logs.db` is a SQLite file), then imported on
//! a thread of its own through the same code as `brain sessions import`
//! (`crate::import::file`), so the connection only waits and other requests go on. One
//! import at a time (a second is 409 before its body is read).
//!
//! The answer: `{"report": …}` (`views::imported`), or an error with its status. With
//! `Accept: application/x-ndjson` it is a stream of lines instead: `{"progress": …}` as
//! conversations are written, then `{"report": …}` or `{"error", "message"}`. A failure
//! before the first conversation is written (the format, the zip, the first conversation)
//! is still an answer with its status; only one found later is a last line of a stream
//! that began 200.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::error::ApiError;
use super::http::{self, Answer};
use super::request::Head;
use super::routes::Reply;
use super::{Api, views};
use crate::import::Source;
use crate::import::file::{Ask, FileError, Imported, Progress, import_path};

/// Default for `--max-import-bytes`: the largest export the server takes (the body, and
/// the `conversations.json` read out of a zip).
pub const DEFAULT_MAX_IMPORT_BYTES: u64 = 1024 * 1024 * 1024;

/// The most progress lines a stream carries per second or so.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// Whether a request is an import (its body goes to a file, not memory).
pub fn is_import(method: &str, segments: &[String]) -> bool {
    method == "POST" && segments.len() == 2 && segments[0] == "v1" && segments[1] == "import"
}

/// `from`, when given: a source's name, or `auto` (the same as none).
pub fn parse_from(
    params: &std::collections::HashMap<String, String>,
) -> Result<Option<Source>, ApiError> {
    let all = [
        Source::ChatGpt,
        Source::Claude,
        Source::OpenWebUi,
        Source::Brain,
        Source::Llm,
    ];
    match params.get("from").map(String::as_str) {
        None | Some("auto") => Ok(None),
        Some(name) => all
            .into_iter()
            .find(|s| s.name() == name)
            .map(Some)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "`from` must be one of chatgpt, claude, openwebui, brain, llm or auto",
                )
            }),
    }
}

/// One import at a time, and a way to stop it.
#[derive(Debug, Default)]
pub struct Gate {
    busy: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

/// The gate, held until dropped.
#[derive(Debug)]
pub struct Held {
    busy: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Gate {
    /// Takes the gate, or 409 when an import is running.
    pub fn take(&self) -> Result<Held, ApiError> {
        match self
            .busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(Held {
                busy: Arc::clone(&self.busy),
                stop: Arc::clone(&self.stop),
            }),
            Err(_) => Err(ApiError::new(
                409,
                "import_running",
                "another import is running; send this one when it has ended",
            )),
        }
    }
}

impl Gate {
    /// Stops a running import (at its next conversation, rolled back) and any later one:
    /// the server is shutting down, and its attempts' last writes must not wait for it.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.busy.store(false, Ordering::Release);
    }
}

/// A received export, waiting to be imported.
#[derive(Debug)]
pub struct Upload {
    pub file: tempfile::NamedTempFile,
    pub from: Option<Source>,
    pub held: Held,
}

/// What the import thread says.
enum Msg {
    Progress(Progress),
    Done(Result<Imported, FileError>),
}

/// An import under way whose progress is streamed.
pub struct Lines {
    rx: mpsc::Receiver<Msg>,
    first: Progress,
}

/// Starts the import and waits for what it says first.
pub fn handle(api: &Api, head: &Head, upload: Upload) -> Reply {
    let ndjson = head
        .header("Accept")
        .is_some_and(|a| a.contains("application/x-ndjson"));
    let rx = match start(api, upload) {
        Ok(rx) => rx,
        Err(e) => return Reply::Answer(http::error(&e)),
    };
    loop {
        match rx.recv() {
            Ok(Msg::Progress(first)) if ndjson => return Reply::Lines(Lines { rx, first }),
            Ok(Msg::Progress(_)) => continue,
            Ok(Msg::Done(r)) => return Reply::Answer(answer(r)),
            Err(_) => {
                return Reply::Answer(http::error(&ApiError::internal(
                    "the import thread ended without a word",
                )));
            }
        }
    }
}

fn start(api: &Api, upload: Upload) -> Result<mpsc::Receiver<Msg>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let limit = api.config.max_import_bytes;
    // Room for a few progress lines; a full channel drops one, never the end.
    let (tx, rx) = mpsc::sync_channel(8);
    std::thread::Builder::new()
        .name("import".into())
        .spawn(move || {
            let Upload { file, from, held } = upload;
            let stop = Arc::clone(&held.stop);
            let ask = Ask {
                from,
                name: "the file",
                from_flag: "from=",
                max_unzipped: limit,
                stop: &stop,
            };
            let mut last: Option<Instant> = None;
            let mut progress = |p: Progress| {
                if last.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
                    last = Some(Instant::now());
                    let _ = tx.try_send(Msg::Progress(p));
                }
            };
            let r = import_path(&store, file.path(), &ask, &mut progress);
            if let Err(e) = &r {
                log::info!("an import sent to the server failed: {e}");
            }
            // The gate opens and the file goes once the import is over, whoever listens.
            drop(held);
            drop(file);
            let _ = tx.send(Msg::Done(r));
        })
        .map_err(ApiError::internal)?;
    Ok(rx)
}

fn report(i: &Imported) -> Value {
    json!({ "report": views::imported(i) })
}

fn answer(r: Result<Imported, FileError>) -> Answer {
    match r {
        Ok(i) => http::json(200, &report(&i)),
        Err(e) => http::error(&ApiError::from(e)),
    }
}

/// Writes the stream: its head, the first progress line, the others as they come, the
/// end. A client that goes away stops the writing, not the import.
pub fn stream(w: &mut dyn Write, lines: Lines, chunked: bool) -> io::Result<()> {
    let framing = if chunked {
        "Transfer-Encoding: chunked\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nCache-Control: no-store\r\n\
         X-Content-Type-Options: nosniff\r\n{framing}Connection: close\r\n\r\n"
    );
    w.write_all(head.as_bytes())?;
    let line = |w: &mut dyn Write, v: &Value| -> io::Result<()> {
        let text = format!("{v}\n");
        if chunked {
            w.write_all(format!("{:x}\r\n{text}\r\n", text.len()).as_bytes())?;
        } else {
            w.write_all(text.as_bytes())?;
        }
        w.flush()
    };
    line(w, &progress(lines.first))?;
    loop {
        let end = match lines.rx.recv() {
            Ok(Msg::Progress(p)) => {
                line(w, &progress(p))?;
                continue;
            }
            Ok(Msg::Done(Ok(i))) => report(&i),
            Ok(Msg::Done(Err(e))) => {
                let e = ApiError::from(e);
                json!({"error": e.code, "message": e.message, "status": e.status})
            }
            Err(_) => json!({"error": "internal", "message": "the import ended without a word"}),
        };
        line(w, &end)?;
        if chunked {
            w.write_all(b"0\r\n\r\n")?;
        }
        return w.flush();
    }
}

fn progress(p: Progress) -> Value {
    json!({"progress": {"bytes": p.bytes, "total": p.total, "conversations": p.conversations}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_names_a_source_or_is_refused() {
        let q = |s: &str| crate::api::request::query_params(s).unwrap();
        assert_eq!(parse_from(&q("")).unwrap(), None);
        assert_eq!(parse_from(&q("from=auto")).unwrap(), None);
        assert_eq!(parse_from(&q("from=claude")).unwrap(), Some(Source::Claude));
        assert_eq!(parse_from(&q("from=word")).unwrap_err().status, 400);
    }

    #[test]
    fn the_gate_lets_one_import_in_at_a_time() {
        let gate = Gate::default();
        let held = gate.take().unwrap();
        assert_eq!(gate.take().unwrap_err().status, 409);
        drop(held);
        assert!(gate.take().is_ok());
    }
}
