//! The person's lines for `brain chat`. On a terminal they come from a line editor
//! (rustyline): arrow keys move the cursor instead of landing in the message, the history
//! is kept in the data directory (mode 0600) and searched with Ctrl-R, Alt-Enter starts a
//! new line in the same message, and a pasted block (bracketed paste) is one message,
//! its bytes as pasted. Through a pipe they are read line by line, as before.
//!
//! Either way the reads run on a thread of their own: a blocked read of standard input
//! cannot be interrupted, and a question asked while an answer runs must give way to
//! Ctrl-C. The editor reads only when asked, so it never draws a prompt over an answer.

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use rustyline::error::ReadlineError;
use rustyline::history::{DefaultHistory, History};
use rustyline::{Cmd, Config, Editor, KeyCode, KeyEvent, Modifiers};

/// How often a read that may give way looks at its flag.
const INPUT_POLL: Duration = Duration::from_millis(50);

/// The most lines the history file keeps.
const HISTORY_LINES: usize = 1_000;

/// What a read brought.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Read {
    Line(String),
    /// The input ended (Ctrl-D on an empty line, the end of a pipe), or the read gave way.
    End,
    /// Ctrl-C while the editor was reading (the terminal is in raw mode then: no signal).
    Interrupted,
}

/// One request to the editor's thread.
struct Ask {
    prompt: String,
    /// Whether the line goes into the history (messages do; a y/n answer does not).
    remember: bool,
}

enum Kind {
    Piped(Receiver<String>),
    Editor {
        asks: Sender<Ask>,
        reads: Receiver<Read>,
    },
}

/// The person's lines.
pub(super) struct Input {
    kind: Kind,
}

impl Input {
    /// A line editor when standard input and output are both a terminal, else lines read
    /// from standard input.
    pub(super) fn open() -> Input {
        use std::io::IsTerminal;
        if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
            match editor() {
                Ok(ed) => return Input::editing(ed),
                Err(e) => log::warn!("no line editing ({e}); reading plain lines"),
            }
        }
        Input::piped()
    }

    /// Whether the editor draws the prompts (and the terminal echoes nothing else).
    pub(super) fn is_editor(&self) -> bool {
        matches!(self.kind, Kind::Editor { .. })
    }

    /// The next line, after `prompt` when the editor draws it (a pipe's caller writes its
    /// own prompt). With `give_way`, a piped read returns [`Read::End`] once it is set.
    pub(super) fn line(&self, prompt: &str, remember: bool, give_way: Option<&AtomicBool>) -> Read {
        match &self.kind {
            Kind::Piped(lines) => piped_line(lines, give_way),
            Kind::Editor { asks, reads } => {
                let ask = Ask {
                    prompt: prompt.to_owned(),
                    remember,
                };
                if asks.send(ask).is_err() {
                    return Read::End;
                }
                reads.recv().unwrap_or(Read::End)
            }
        }
    }

    fn piped() -> Input {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Input {
            kind: Kind::Piped(rx),
        }
    }

    fn editing(mut ed: Editor<(), DefaultHistory>) -> Input {
        let (asks, asked) = mpsc::channel::<Ask>();
        let (answer, reads) = mpsc::channel();
        let file = history_file();
        if let Some(f) = &file {
            // A first start has no file yet: nothing to load.
            let _ = ed.load_history(f);
        }
        std::thread::spawn(move || {
            for ask in asked {
                let read = match ed.readline(&ask.prompt) {
                    Ok(line) => {
                        if ask.remember && !line.trim().is_empty() {
                            let _ = ed.add_history_entry(line.as_str());
                            save(&mut ed, file.as_deref());
                        }
                        Read::Line(line)
                    }
                    Err(ReadlineError::Interrupted) => Read::Interrupted,
                    Err(ReadlineError::Eof) => Read::End,
                    Err(e) => {
                        log::warn!("the line editor failed: {e}");
                        Read::End
                    }
                };
                if answer.send(read).is_err() {
                    return;
                }
            }
        });
        Input {
            kind: Kind::Editor { asks, reads },
        }
    }
}

fn piped_line(lines: &Receiver<String>, give_way: Option<&AtomicBool>) -> Read {
    let Some(flag) = give_way else {
        return lines.recv().map_or(Read::End, Read::Line);
    };
    loop {
        if flag.load(Ordering::SeqCst) {
            return Read::End;
        }
        match lines.recv_timeout(INPUT_POLL) {
            Ok(line) => return Read::Line(line),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Read::End,
        }
    }
}

/// The editor: bracketed paste on (one message per paste), Alt-Enter a new line.
fn editor() -> rustyline::Result<Editor<(), DefaultHistory>> {
    let config = Config::builder()
        .auto_add_history(false)
        .max_history_size(HISTORY_LINES)?
        .history_ignore_dups(true)?
        .bracketed_paste(true)
        .build();
    let mut ed = Editor::with_config(config)?;
    ed.bind_sequence(KeyEvent(KeyCode::Enter, Modifiers::ALT), Cmd::Newline);
    Ok(ed)
}

/// The history file, `brain/chat_history` in the data directory (where the default
/// database lives); `None` without one (no home): the history is then this run's only.
fn history_file() -> Option<PathBuf> {
    let dir = dirs::data_dir()?.join("brain");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join("chat_history"))
}

/// Writes the history after each message, so a killed chat keeps what was typed; the
/// file is the user's only (rustyline creates it 0600).
fn save(ed: &mut Editor<(), DefaultHistory>, file: Option<&std::path::Path>) {
    let Some(f) = file else { return };
    if ed.history().is_empty() {
        return;
    }
    if let Err(e) = ed.save_history(f) {
        log::warn!("cannot save the chat history to {}: {e}", f.display());
    }
}
