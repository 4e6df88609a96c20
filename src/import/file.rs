//! One import, from a file or a stream, the same for `brain sessions import` and
//! `POST /v1/import`: a zip is opened for its `conversations.json` (`archive.rs`), the
//! format is the one asked for or the one the bytes show (`detect.rs`), and the file goes
//! to its reader and the shared import, telling `progress` as it goes. All or nothing:
//! a file that cannot be read whole (a truncated one included) imports nothing.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::apply::{ImportError, Report, import_conversations};
use super::archive::{self, ArchiveError};
use super::brain::{self, BrainError, BrainImport};
use super::detect::{Shape, rejoin, sniff};
use super::{Source, chatgpt, claude, llm, openwebui};
use crate::session::Store;

/// The largest `conversations.json` read out of a zip by `brain sessions import` (the
/// server's bound is `--max-import-bytes`): past it, a zip bomb rather than an export.
pub const MAX_UNZIPPED_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// How far an import has got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the export read (of `conversations.json`, for a zip).
    pub bytes: u64,
    /// Its size, when known.
    pub total: Option<u64>,
    pub conversations: usize,
}

/// What an import did.
#[derive(Debug)]
pub enum Imported {
    /// Nothing to import; what the file is (an empty array).
    Nothing(&'static str),
    Conversations {
        source: Source,
        report: Report,
    },
    /// brain's own JSONL: this many sessions read.
    Brain {
        sessions: usize,
        done: BrainImport,
    },
}

/// Why an import wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file is not what was asked for, or not an export at all.
    #[error("{0} (nothing was imported)")]
    Refused(String),
    #[error("{0} (nothing was imported)")]
    Archive(#[from] ArchiveError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Brain(#[from] BrainError),
    #[error("cannot read the file: {0} (nothing was imported)")]
    Io(#[from] std::io::Error),
}

/// How an import is asked for.
pub struct Ask<'a> {
    /// The tool that wrote the file; `None`: whichever its shape shows.
    pub from: Option<Source>,
    /// The file's name, for messages.
    pub name: &'a str,
    /// How the user names a source (`--from ` on the command line, `from=` over HTTP).
    pub from_flag: &'static str,
    /// The most bytes of `conversations.json` read out of a zip.
    pub max_unzipped: u64,
    /// Set to stop the import (rolled back) between two conversations.
    pub stop: &'a AtomicBool,
}

/// Where the bytes come from: llm's `logs.db` can be read only from a file of its own.
#[derive(Clone, Copy)]
enum Origin<'a> {
    Path(&'a Path),
    Stdin,
    Zip,
}

/// Imports the file at `path`: a zip's `conversations.json`, llm's `logs.db`, or an export.
pub fn import_path(
    store: &Store,
    path: &Path,
    ask: &Ask<'_>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Imported, FileError> {
    let mut file = File::open(path)?;
    let size = file.metadata().ok().map(|m| m.len());
    let mut magic = Vec::with_capacity(4);
    (&mut file).take(4).read_to_end(&mut magic)?;
    file.seek(SeekFrom::Start(0))?;
    if !archive::is_zip(&magic) {
        return import_stream(
            store,
            Box::new(file),
            size,
            Origin::Path(path),
            ask,
            progress,
        );
    }
    let limit = ask.max_unzipped;
    let (result, over) = archive::with_conversations(file, limit, |entry| {
        let over = entry.over;
        let r = import_stream(
            store,
            entry.reader,
            Some(entry.size),
            Origin::Zip,
            ask,
            progress,
        );
        (r, over)
    })?;
    // A read stopped at the bound fails wherever it was; the bound is the reason.
    if over.load(Ordering::Relaxed) {
        return Err(ArchiveError::TooLarge { limit }.into());
    }
    result
}

/// Imports standard input (a stream: not a zip, nor a SQLite database).
pub fn import_stdin(
    store: &Store,
    input: Box<dyn Read + Send + '_>,
    ask: &Ask<'_>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Imported, FileError> {
    import_stream(store, input, None, Origin::Stdin, ask, progress)
}

fn import_stream(
    store: &Store,
    mut input: Box<dyn Read + Send + '_>,
    total: Option<u64>,
    origin: Origin<'_>,
    ask: &Ask<'_>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Imported, FileError> {
    let (prefix, shape) = sniff(&mut input)?;
    if archive::is_zip(&prefix) {
        return Err(FileError::Refused(
            "a zip is read from its end: give its path, not standard input".into(),
        ));
    }
    let Some(source) = decide(ask, shape)? else {
        return Ok(Imported::Nothing(shape.describe()));
    };
    let read = Arc::new(AtomicU64::new(prefix.len() as u64));
    let counted = Counted {
        inner: input,
        read: Arc::clone(&read),
    };
    let mut reader = rejoin(prefix, counted);
    let mut tick = |conversations: usize| {
        progress(Progress {
            bytes: read.load(Ordering::Relaxed).min(total.unwrap_or(u64::MAX)),
            total,
            conversations,
        })
    };
    let report = match (source, origin) {
        (Source::Brain, _) => {
            let sessions = brain::read_jsonl(&mut reader)?;
            let done = brain::import(store, &sessions)?;
            tick(sessions.len());
            return Ok(Imported::Brain {
                sessions: sessions.len(),
                done,
            });
        }
        (Source::ChatGpt, _) => {
            import_conversations(store, chatgpt::read(reader), ask.stop, &mut tick)
        }
        (Source::Claude, _) => {
            import_conversations(store, claude::read(reader), ask.stop, &mut tick)
        }
        (Source::OpenWebUi, _) => {
            import_conversations(store, openwebui::read(reader), ask.stop, &mut tick)
        }
        (Source::Llm, Origin::Path(path)) => {
            drop(reader);
            import_conversations(store, llm::read(path), ask.stop, &mut tick)
        }
        // SQLite reads a database from a file it can seek in, not from a stream.
        (Source::Llm, Origin::Stdin) => {
            return Err(FileError::Refused(
                "llm's logs.db is a SQLite database: give its path, not standard input".into(),
            ));
        }
        (Source::Llm, Origin::Zip) => {
            return Err(FileError::Refused(
                "the zip's conversations.json is a SQLite database: unzip it and import \
                 the database itself"
                    .into(),
            ));
        }
    }?;
    Ok(Imported::Conversations { source, report })
}

/// Which tool wrote the file: the one asked for (refused when the file's shape says
/// another), or the one its shape shows; `None` when there is nothing to import.
pub fn decide(ask: &Ask<'_>, shape: Shape) -> Result<Option<Source>, FileError> {
    let flag = ask.from_flag;
    match (ask.from, shape) {
        (None, Shape::Is(s)) => Ok(Some(s)),
        (None, Shape::EmptyArray) => Ok(None),
        (None, Shape::Unknown(what)) => Err(FileError::Refused(format!(
            "cannot tell which tool wrote {}: it is {what}",
            ask.name
        ))),
        (Some(wanted), Shape::Is(s)) if s != wanted => Err(FileError::Refused(format!(
            "{} looks like {}, not {}: try {flag}{} or {flag}auto",
            ask.name,
            shape.describe(),
            wanted.name(),
            s.name()
        ))),
        (Some(wanted), _) => Ok(Some(wanted)),
    }
}

/// Counts the bytes read, for progress.
struct Counted<'a> {
    inner: Box<dyn Read + Send + 'a>,
    read: Arc<AtomicU64>,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static NEVER: AtomicBool = AtomicBool::new(false);

    fn ask(from: Option<Source>) -> Ask<'static> {
        Ask {
            from,
            name: "x.json",
            from_flag: "--from ",
            max_unzipped: 1,
            stop: &NEVER,
        }
    }

    #[test]
    fn the_source_is_the_one_asked_for_or_the_one_the_file_shows() {
        let chatgpt = Shape::Is(Source::ChatGpt);
        assert_eq!(
            decide(&ask(None), chatgpt).ok(),
            Some(Some(Source::ChatGpt))
        );
        assert_eq!(decide(&ask(None), Shape::EmptyArray).ok(), Some(None));
        let wrong = decide(&ask(Some(Source::Claude)), chatgpt).unwrap_err();
        assert_eq!(
            wrong.to_string(),
            "x.json looks like a ChatGPT export (conversations with a `mapping`), not \
             claude: try --from chatgpt or --from auto (nothing was imported)"
        );
        let unknown = decide(&ask(None), Shape::Unknown("an empty file")).unwrap_err();
        assert!(unknown.to_string().contains("cannot tell which tool"));
        // Asked for, and the shape does not say otherwise: believed.
        let given = decide(&ask(Some(Source::Llm)), Shape::Unknown("?"));
        assert_eq!(given.ok(), Some(Some(Source::Llm)));
    }
}
