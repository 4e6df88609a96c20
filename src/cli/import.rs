//! `brain sessions import FILE|- [--from …]` (SPEC §15): the file's format (given, or
//! recognised by its shape), its reader, the shared import, the report, and a progress bar
//! when standard error is a terminal.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::term::{count, printable};
use super::{CliError, ImportFrom, transfer};
use crate::import::apply::{Report, import_conversations};
use crate::import::detect::{Shape, rejoin, sniff};
use crate::import::{Source, chatgpt, claude, llm, openwebui};
use crate::session::Store;

pub fn run(
    store: &Store,
    file: &Path,
    from: ImportFrom,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let input_error = |source| CliError::Input {
        path: file.to_owned(),
        source,
    };
    let stdin = file.as_os_str() == "-";
    let (mut input, size): (Box<dyn Read>, Option<u64>) = if stdin {
        (Box::new(std::io::stdin().lock()), None)
    } else {
        let f = std::fs::File::open(file).map_err(input_error)?;
        let size = f.metadata().ok().map(|m| m.len());
        (Box::new(f), size)
    };
    let (prefix, shape) = sniff(&mut input).map_err(input_error)?;
    let Some(source) = source(from, shape, file, out)? else {
        return Ok(());
    };
    let read = Arc::new(AtomicU64::new(0));
    let counted = Counted {
        inner: input,
        read: Arc::clone(&read),
        // The prefix was read already: count it when it is read again.
        skip: prefix.len() as u64,
    };
    let reader = rejoin(prefix, counted);
    let bar = progress(size);
    let mut tick = |n: usize| {
        bar.set_position(read.load(Ordering::Relaxed));
        bar.set_message(count(n as u64, "conversation"));
    };
    let report = match source {
        Source::Brain => {
            drop(bar);
            return brain(store, reader, out);
        }
        Source::ChatGpt => import_conversations(store, chatgpt::read(reader), &mut tick),
        Source::Claude => import_conversations(store, claude::read(reader), &mut tick),
        Source::OpenWebUi => import_conversations(store, openwebui::read(reader), &mut tick),
        // SQLite reads a database from a file it can seek in, not from a stream.
        Source::Llm if stdin => {
            return Err(CliError::ImportFailed(
                "llm's logs.db is a SQLite database: give its path, not standard input \
                 (nothing was imported)"
                    .into(),
            ));
        }
        Source::Llm => {
            drop(reader);
            import_conversations(store, llm::read(file), &mut tick)
        }
    };
    bar.finish_and_clear();
    let report =
        report.map_err(|e| CliError::ImportFailed(printable(&e.to_string()).into_owned()))?;
    write_report(out, source, &report)
}

/// Which tool wrote the file: the one `--from` names (refused when the file's shape says
/// another), or the one its shape shows; `None` when there is nothing to import.
fn source(
    from: ImportFrom,
    shape: Shape,
    file: &Path,
    out: &mut dyn Write,
) -> Result<Option<Source>, CliError> {
    Ok(Some(match (from, shape) {
        (ImportFrom::Auto, Shape::Is(s)) => s,
        (ImportFrom::Auto, Shape::EmptyArray) => {
            writeln!(out, "nothing to import: {}", shape.describe())?;
            return Ok(None);
        }
        (ImportFrom::Auto, Shape::Unknown(what)) => {
            return Err(CliError::ImportFailed(format!(
                "cannot tell which tool wrote {}: it is {what} (nothing was imported)",
                file.display()
            )));
        }
        (given, shape) => {
            let wanted = named(given);
            match shape {
                Shape::Is(s) if s != wanted => {
                    return Err(CliError::ImportFailed(format!(
                        "{} looks like {}, not {}: try --from {} or --from auto (nothing \
                         was imported)",
                        file.display(),
                        shape.describe(),
                        wanted.name(),
                        s.name()
                    )));
                }
                _ => wanted,
            }
        }
    }))
}

fn named(from: ImportFrom) -> Source {
    match from {
        ImportFrom::Auto | ImportFrom::Brain => Source::Brain,
        ImportFrom::Chatgpt => Source::ChatGpt,
        ImportFrom::Claude => Source::Claude,
        ImportFrom::Openwebui => Source::OpenWebUi,
        ImportFrom::Llm => Source::Llm,
    }
}

/// This project's JSONL, as before: every session or nothing.
fn brain(
    store: &Store,
    mut reader: impl std::io::BufRead,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let sessions = transfer::read_jsonl(&mut reader)?;
    let done = transfer::import(store, &sessions)?;
    writeln!(
        out,
        "imported {} ({}): {} created, {} extended, {} unchanged",
        count(sessions.len() as u64, "session"),
        count(done.events as u64, "event"),
        done.created,
        done.extended,
        done.unchanged
    )?;
    Ok(())
}

/// A bar of bytes read when the size is known and standard error is a terminal; nothing
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

/// The report (SPEC §15): sessions created, extended, unchanged and forked; messages;
/// what was left out; time.
fn write_report(out: &mut dyn Write, source: Source, r: &Report) -> Result<(), CliError> {
    writeln!(
        out,
        "imported {} from {}: {} created, {} extended, {} unchanged, {} forked; {}",
        count(r.conversations as u64, "conversation"),
        source.name(),
        r.created,
        r.extended,
        r.unchanged,
        r.forked.len(),
        count(r.messages, "message")
    )?;
    if !r.skipped.is_empty() {
        let parts: Vec<String> = r.skipped.iter().map(|(k, n)| format!("{n} {k}")).collect();
        writeln!(out, "left out: {}", printable(&parts.join(", ")))?;
    }
    for f in &r.forked {
        writeln!(
            out,
            "forked: {}{} differs from its earlier import; the new version is session {} \
             (a fork of {} at #{})",
            printable(&f.conversation),
            f.title
                .as_deref()
                .map(|t| format!(" “{}”", printable(t)))
                .unwrap_or_default(),
            f.id,
            f.from,
            f.seq
        )?;
    }
    writeln!(
        out,
        "took {:.2} s (the database's writer held {:.2} s)",
        r.elapsed.as_secs_f64(),
        r.writer_held.as_secs_f64()
    )?;
    Ok(())
}

/// Counts the bytes read, for the progress bar.
struct Counted {
    inner: Box<dyn Read>,
    read: Arc<AtomicU64>,
    skip: u64,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.read.load(Ordering::Relaxed) == 0 {
            self.read.store(self.skip, Ordering::Relaxed);
        }
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}
