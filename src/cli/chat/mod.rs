//! `brain chat`: a terminal chat. It talks to the server holding the database (its URL is
//! in the lock file) or to `--url`, and runs the engine in-process only when no server
//! holds the database. Ctrl-C stops the answer being written; a second Ctrl-C (or one at
//! the prompt) leaves.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use signal_hook::consts::SIGINT;

use super::term::printable;
use super::{ChatArgs, CliError};
use crate::chat::consent::Answer;

mod backend;
mod input;
mod markdown;

use crate::session::{SessionId, SyncMode};
pub(crate) use backend::Backend;
use backend::backend;
use input::{Input, Read};
use markdown::Shown;

/// Transcript items shown when a session is resumed.
const RESUME_ITEMS: usize = 20;

pub(crate) type Frames = Box<dyn Iterator<Item = Value> + Send>;

pub fn run(
    db: Option<PathBuf>,
    sync: SyncMode,
    args: ChatArgs,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let backend = backend(db, sync, &args)?;
    // Answers are styled markdown on a terminal; through a pipe they are the bytes sent.
    let styled = markdown::wanted(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("TERM").as_deref(),
    );
    let id = open_session(backend.as_ref(), args.session.as_deref(), styled, out)?;
    banner(backend.as_ref(), id, out)?;
    out.flush()?;
    let active = Arc::new(AtomicBool::new(false));
    // `/fork` moves the chat to the new session; Ctrl-C stops the current one's answer.
    let current = Arc::new(Mutex::new(id));
    let stopped = Arc::new(AtomicBool::new(false));
    watch_interrupts(
        Arc::clone(&backend),
        Arc::clone(&current),
        Arc::clone(&active),
        Arc::clone(&stopped),
    )?;
    // A visible prompt on a terminal; through a pipe nothing is echoed, so the line read
    // is shown after it instead and the output reads as the conversation it was.
    let terminal = std::io::stdin().is_terminal();
    let lines = Input::open();
    loop {
        let Some(line) = prompt(&lines, terminal, out)? else {
            break;
        };
        let text = line.trim();
        match text {
            "" => continue,
            "/quit" | "/exit" => break,
            _ => {}
        }
        let Some(id) = session_for(backend.as_ref(), &current, text, out)? else {
            continue;
        };
        let frames = match text {
            "/retry" => backend.retry(id),
            "/fork" => {
                fork(backend.as_ref(), &current, id, out)?;
                continue;
            }
            t if t == "/edit" || t.starts_with("/edit ") => {
                let mut read_line = |prompt: &str| read(&lines, prompt, false, None);
                let editor = lines.is_editor();
                match super::chat_edit::edit_text(t, terminal, editor, &mut read_line, out)? {
                    Some(new_text) => super::chat_edit::edit_last(backend.as_ref(), id, &new_text),
                    None => continue,
                }
            }
            _ => backend.send(id, text),
        };
        match frames {
            Ok(frames) => {
                let turn = Turn {
                    backend: backend.as_ref(),
                    id,
                    lines: &lines,
                    terminal,
                    styled,
                    active: &active,
                    stopped: &stopped,
                };
                turn.show(frames, out)?;
            }
            Err(e) => writeln!(out, "[{}]\n", printable(&e.to_string()))?,
        }
        out.flush()?;
    }
    backend.close();
    Ok(())
}

/// The first line: which session, who answers, and what can be typed.
fn banner(
    backend: &dyn Backend,
    id: Option<SessionId>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let which = match id {
        Some(id) => format!("session {id}"),
        // Made with the first message: a chat left at once leaves no empty session.
        None => "a new session".to_owned(),
    };
    writeln!(
        out,
        "{which} ({}). Type a message (Alt-Enter for a new line); /retry answers the last one \
         again; /edit [text] replaces your last message; /fork continues in a copy; /quit or \
         Ctrl-D leaves; Ctrl-C stops an answer.",
        backend.describe()
    )?;
    Ok(())
}

/// One answer being shown, with what its questions and Ctrl-C need.
struct Turn<'a> {
    backend: &'a dyn Backend,
    id: SessionId,
    lines: &'a Input,
    terminal: bool,
    styled: bool,
    /// Set while an answer runs: Ctrl-C then stops it instead of leaving.
    active: &'a AtomicBool,
    stopped: &'a AtomicBool,
}

impl Turn<'_> {
    /// Shows the answer's frames as they come, asking its permission questions.
    fn show(&self, frames: Frames, out: &mut dyn Write) -> Result<(), CliError> {
        self.stopped.store(false, Ordering::SeqCst);
        self.active.store(true, Ordering::SeqCst);
        // A question asked while the answer runs gives way to Ctrl-C: the stop
        // answers it (the server denies it), no line is waited for.
        let mut read_line = |prompt: &str| match self.lines.line(prompt, false, Some(self.stopped))
        {
            Read::Line(l) => Some(Ok(l)),
            Read::End => None,
            Read::Interrupted => Some(Err(Interrupted)),
        };
        let mut consent = Consent {
            backend: self.backend,
            id: self.id,
            read_line: &mut read_line,
            terminal: self.terminal,
            editor: self.lines.is_editor(),
            stopped: self.stopped,
        };
        let shown = show_frames(frames, out, &mut consent, Shown::new(self.styled));
        self.active.store(false, Ordering::SeqCst);
        shown
    }
}

/// The session `text` goes to: the current one, or for a first message a new one (said
/// on its own line); `None` when there is none to retry, edit or fork yet.
fn session_for(
    backend: &dyn Backend,
    current: &Mutex<Option<SessionId>>,
    text: &str,
    out: &mut dyn Write,
) -> Result<Option<SessionId>, CliError> {
    let mut current = current.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(id) = *current {
        return Ok(Some(id));
    }
    let command = text.split_whitespace().next().unwrap_or_default();
    if matches!(command, "/retry" | "/edit" | "/fork") {
        writeln!(
            out,
            "[nothing to {} yet: send a message first]\n",
            &command[1..]
        )?;
        return Ok(None);
    }
    match backend.create() {
        Ok(id) => {
            *current = Some(id);
            writeln!(out, "[new session {id}]")?;
            Ok(Some(id))
        }
        Err(e) => {
            writeln!(out, "[{}]\n", printable(&e.to_string()))?;
            Ok(None)
        }
    }
}

/// The session `--session` names, its recent history shown; `None` for a new one, made
/// with the first message.
fn open_session(
    backend: &dyn Backend,
    session: Option<&str>,
    styled: bool,
    out: &mut dyn Write,
) -> Result<Option<SessionId>, CliError> {
    Ok(match session {
        Some(s) => {
            let id: SessionId = s.parse()?;
            for item in backend.history(id)? {
                show_item(&item, &mut Shown::new(styled), out)?;
            }
            Some(id)
        }
        None => None,
    })
}

/// The person's next message (`None` at the end of input, or Ctrl-C at the prompt: both
/// leave). On a terminal the editor draws the prompt; through a pipe the line is shown
/// after it instead, as the conversation reads.
fn prompt(lines: &Input, terminal: bool, out: &mut dyn Write) -> Result<Option<String>, CliError> {
    if terminal && !lines.is_editor() {
        write!(out, "{PROMPT}")?;
    }
    out.flush()?;
    let Some(line) = read(lines, PROMPT, true, None) else {
        return Ok(None);
    };
    let text = line.trim();
    if !terminal && !text.is_empty() {
        writeln!(out, "{PROMPT}{}", printable(text))?;
    }
    Ok(Some(line))
}

/// One line, with `prompt` drawn by the editor (a pipe's prompt is the caller's); Ctrl-C
/// in the editor and the end of input are `None`.
fn read(
    lines: &Input,
    prompt: &str,
    remember: bool,
    give_way: Option<&AtomicBool>,
) -> Option<String> {
    match lines.line(prompt, remember, give_way) {
        Read::Line(l) => Some(l),
        Read::End | Read::Interrupted => None,
    }
}

/// Ctrl-C pressed while the editor read an answer to a question: the answer running is
/// stopped, as the signal does while it streams.
struct Interrupted;

/// `/fork`: the chat goes on in a copy of the session `id`, or says why it cannot.
fn fork(
    backend: &dyn Backend,
    current: &Mutex<Option<SessionId>>,
    id: SessionId,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    match backend.fork(id) {
        Ok(new) => {
            *current.lock().unwrap_or_else(PoisonError::into_inner) = Some(new);
            writeln!(out, "[forked into session {new}; continuing there]\n")?;
        }
        Err(e) => writeln!(out, "[{}]\n", printable(&e.to_string()))?,
    }
    out.flush()?;
    Ok(())
}

/// Ctrl-C stops the running answer; a second one during it (or one at the prompt)
/// leaves. `stopped` says the running answer was asked to stop; the loop clears it when
/// the next answer starts, so each answer can be stopped.
fn watch_interrupts(
    backend: Arc<dyn Backend>,
    current: Arc<Mutex<Option<SessionId>>>,
    active: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
) -> Result<(), CliError> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT])
        .map_err(|e| CliError::Serve(format!("cannot handle Ctrl-C: {e}")))?;
    std::thread::spawn(move || {
        for _ in signals.forever() {
            if active.load(Ordering::SeqCst) && !stopped.swap(true, Ordering::SeqCst) {
                eprintln!("\n[stopping the answer; Ctrl-C again to leave]");
                if let Some(id) = *current.lock().unwrap_or_else(PoisonError::into_inner) {
                    // On a thread of its own: a stop that waits for the server must not
                    // keep the next Ctrl-C (leave) from being heard.
                    let backend = Arc::clone(&backend);
                    std::thread::spawn(move || backend.stop(id));
                }
                continue;
            }
            backend.close();
            std::process::exit(130);
        }
    });
    Ok(())
}

/// What the user's lines start with, typed or shown.
const PROMPT: &str = "you › ";

/// How a permission question is put to the person and answered.
struct Consent<'a> {
    backend: &'a dyn Backend,
    id: SessionId,
    /// The person's next line; None at the end of input.
    /// The person's next line after a prompt; None at the end of input, `Err` for Ctrl-C
    /// in the editor.
    read_line: &'a mut dyn FnMut(&str) -> Option<Result<String, Interrupted>>,
    terminal: bool,
    /// The editor draws the question as its prompt.
    editor: bool,
    /// Set by Ctrl-C: the stop answers the question, so the person's answer is not sent.
    stopped: &'a AtomicBool,
}

impl Consent<'_> {
    /// Asks about one call (`Allow NAME(args)? [y]es / [n]o / [a]lways `), reads one line
    /// and answers through the backend. Anything but yes or always, and the end of input,
    /// is no.
    fn ask(&mut self, f: &Value, out: &mut dyn Write) -> Result<(), CliError> {
        let name = f["name"].as_str().unwrap_or_default();
        let args = f["args"].as_str().unwrap_or_default();
        let question = format!(
            "Allow {}({})? [y]es / [n]o / [a]lways ",
            printable(name),
            printable(&short_args(args, PERMISSION_ARGS_CHARS))
        );
        writeln!(out)?;
        if !self.editor {
            write!(out, "{question}")?;
        }
        out.flush()?;
        let line = match (self.read_line)(&question) {
            Some(Ok(line)) => Some(line),
            None => None,
            Some(Err(Interrupted)) => {
                // Raw mode swallowed the signal: stop the answer as Ctrl-C does (the
                // server denies the question), and say so.
                self.stopped.store(true, Ordering::SeqCst);
                writeln!(out, "\n[stopping the answer; Ctrl-C again to leave]")?;
                self.backend.stop(self.id);
                return Ok(());
            }
        };
        if self.stopped.load(Ordering::SeqCst) {
            writeln!(out)?;
            return Ok(());
        }
        // Through a pipe nothing is echoed: the answer read is shown, as typed lines are.
        if !self.terminal {
            writeln!(out, "{}", printable(line.as_deref().unwrap_or("").trim()))?;
        }
        let answer = consent_answer(line.as_deref());
        let call_id = f["call_id"].as_str().unwrap_or_default();
        if let Err(e) = self.backend.answer(self.id, call_id, answer) {
            writeln!(out, "[could not answer: {}]", printable(&e.to_string()))?;
        }
        Ok(())
    }
}

/// `text` percent-encoded as one path segment (all but RFC 3986's unreserved characters).
fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Characters of a call's arguments shown inline, and in a question.
const CALL_ARGS_CHARS: usize = 60;
const PERMISSION_ARGS_CHARS: usize = 300;

/// The arguments on one line (compact JSON when they parse), cut at `max` characters.
fn short_args(args: &str, max: usize) -> String {
    let compact = serde_json::from_str::<Value>(args)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| args.to_owned());
    if compact.chars().count() <= max {
        return compact;
    }
    let mut cut: String = compact.chars().take(max).collect();
    cut.push('…');
    cut
}

/// The person's line as an answer: y/yes allows, a/always allows for the session, anything
/// else (and the end of input) denies.
fn consent_answer(line: Option<&str>) -> Answer {
    let word = line.unwrap_or_default().trim().to_lowercase();
    let (allow, remember) = match word.as_str() {
        "y" | "yes" => (true, false),
        "a" | "always" => (true, true),
        _ => (false, false),
    };
    Answer { allow, remember }
}

/// A call's end in words, with its time: `ok, 12 ms`.
fn call_status(status: &str, ms: u64) -> String {
    let words = match status {
        "timeout" => "timed out",
        other => other,
    };
    format!("{}, {ms} ms", printable(words))
}

fn show_frames(
    frames: Frames,
    out: &mut dyn Write,
    consent: &mut Consent<'_>,
    mut answer: Shown,
) -> Result<(), CliError> {
    let mut thinking = false;
    let mut after_call = false;
    write!(out, "assistant: ")?;
    for f in frames {
        let kind = f["type"].as_str().unwrap_or_default();
        // What the styling held back goes before anything that is not the answer's text.
        if kind != "chunk" {
            write!(out, "{}", answer.finish())?;
        }
        match kind {
            "tool_call" => write!(
                out,
                "\n[tool {} {}] ",
                printable(f["name"].as_str().unwrap_or_default()),
                printable(&short_args(
                    f["args"].as_str().unwrap_or_default(),
                    CALL_ARGS_CHARS
                ))
            )?,
            "permission" => consent.ask(&f, out)?,
            "tool_result" => {
                after_call = true;
                write!(
                    out,
                    "[{}]",
                    call_status(
                        f["status"].as_str().unwrap_or_default(),
                        f["duration_ms"].as_u64().unwrap_or_default()
                    )
                )?
            }
            "status" if f["phase"] == "compacting" => {
                write!(out, "[compacting the conversation…] ")?
            }
            "reasoning" if !thinking => {
                thinking = true;
                write!(out, "[thinking…] ")?
            }
            // Each chunk on its own: `printable` needs no state, so a sequence split
            // between chunks is made visible all the same.
            "chunk" => {
                let text = f["text"].as_str().unwrap_or_default();
                // Text after a call starts on a line of its own (a step's text has a blank
                // line before it only when an earlier step had text).
                if std::mem::take(&mut after_call) && !text.starts_with('\n') {
                    writeln!(out)?;
                }
                write!(out, "{}", answer.text(text))?
            }
            "error" => write!(
                out,
                "\n[error {}: {}]",
                printable(f["code"].as_str().unwrap_or("?")),
                printable(f["message"].as_str().unwrap_or(""))
            )?,
            "end" => {
                match f["status"].as_str().unwrap_or_default() {
                    // Ctrl-C: the person stopped it, nothing was cut off.
                    "interrupted" | "failed" if consent.stopped.load(Ordering::SeqCst) => write!(
                        out,
                        "\n[stopped: what was written is kept; /retry for a new answer, or say more]"
                    )?,
                    "interrupted" => write!(
                        out,
                        "\n[interrupted: the answer was cut off; /retry, or say more to continue]"
                    )?,
                    "failed" => write!(out, "\n[failed: no answer; /retry to try again]")?,
                    _ => {}
                }
                // The end of the answer, then a blank line between turns.
                writeln!(out, "\n")?;
            }
            _ => {}
        }
        out.flush()?;
    }
    Ok(())
}

fn show_item(item: &Value, answer: &mut Shown, out: &mut dyn Write) -> Result<(), CliError> {
    let field = |name: &str| printable(item[name].as_str().unwrap_or_default()).into_owned();
    let text = field("text");
    let mut answer_text = || answer.whole(item["text"].as_str().unwrap_or_default());
    match item["kind"].as_str().unwrap_or_default() {
        "user" => writeln!(out, "{PROMPT}{text}")?,
        "assistant" => writeln!(out, "assistant: {}\n", answer_text())?,
        "interrupted" => writeln!(out, "assistant (interrupted): {}\n", answer_text())?,
        "streaming" => writeln!(out, "assistant (still answering): {}\n", answer_text())?,
        "error" => writeln!(out, "[failed: {}]\n", field("code"))?,
        "compaction" => writeln!(out, "[compacted: {}]", field("summary"))?,
        "title" => writeln!(out, "[renamed to {:?}]", field("title"))?,
        "tool" => writeln!(
            out,
            "[tool {} {}: {}]",
            field("name"),
            printable(&short_args(
                item["args"].as_str().unwrap_or_default(),
                CALL_ARGS_CHARS
            )),
            call_status(
                item["status"].as_str().unwrap_or_default(),
                item["duration_ms"].as_u64().unwrap_or_default()
            )
        )?,
        "permission" => writeln!(
            out,
            "[asked about {}: {}]",
            field("name"),
            match (item["decision"].as_str(), item["by"].as_str()) {
                (None, _) => "not answered".to_owned(),
                (Some(d), Some(by)) => super::decided_words(&printable(d), &printable(by)),
                (Some(d), None) => printable(d).into_owned(),
            }
        )?,
        other => writeln!(out, "[{}]", printable(other))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_yes_and_always_allow() {
        let a = |l: Option<&str>| {
            let x = consent_answer(l);
            (x.allow, x.remember)
        };
        for yes in ["y", "Y", " yes ", "YES"] {
            assert_eq!(a(Some(yes)), (true, false), "{yes}");
        }
        for always in ["a", "always", "A\r"] {
            assert_eq!(a(Some(always)), (true, true), "{always}");
        }
        for no in ["n", "no", "", "yy", "sure", "y es", "\u{1b}y"] {
            assert_eq!(a(Some(no)), (false, false), "{no:?}");
        }
        assert_eq!(a(None), (false, false), "the end of input is no");
    }

    #[test]
    fn short_args_are_compact_and_cut_on_characters() {
        assert_eq!(short_args("{ \"a\" : 1 }", 60), "{\"a\":1}");
        assert_eq!(short_args("not json", 60), "not json");
        assert_eq!(short_args(&"é".repeat(10), 4), "éééé…");
    }

    #[test]
    fn a_call_id_is_one_path_segment() {
        assert_eq!(path_segment("call_1-a.b~"), "call_1-a.b~");
        assert_eq!(path_segment("a/b c?é"), "a%2Fb%20c%3F%C3%A9");
    }
}
