//! The command line: what each command does; the raw arguments (clap) are in `args`.
//!
//! Errors are returned as [`CliError`]; `main` prints them and picks the exit code.
//! Output goes to a writer given by `main`, so a closed pipe (`brain … | head`) is an
//! ordinary error, not a panic.

mod args;
mod chat;
mod chat_edit;
mod fork;
mod import;
pub mod lock;
mod serve;
mod sessions;
pub mod term;
mod tools;
mod transfer;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;

pub use args::*;

use crate::config;
use crate::session::events::BadSessionId;
use crate::session::store::coord::Coordinator;
use crate::session::store::{self, OlderSchema};
use crate::session::{Store, StoreError, StoreOptions, SyncMode};

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    BadSessionId(#[from] BadSessionId),
    #[error(
        "no default database location on this system (no home directory); pass --db PATH \
         or set BRAIN_DB"
    )]
    NoDataDir,
    #[error("cannot create the directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Provider(#[from] crate::provider::ProviderError),
    #[error("{0}")]
    Compaction(#[from] crate::session::compactor::CompactionError),
    #[error("{0}")]
    Serve(String),
    #[error("{0}")]
    Tools(String),
    #[error("{0}")]
    ImportFailed(String),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    #[error("cannot read {}: {source}", path.display())]
    Input {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("refusing to write the export to {}: {why}", path.display())]
    OutputRefused { path: PathBuf, why: &'static str },
    #[error("{}", locked_message(.0, .1))]
    Locked(lock::LockError, &'static str),
}

fn locked_message(e: &lock::LockError, advice: &str) -> String {
    match e {
        lock::LockError::Held { .. } => format!("{e}; {advice}"),
        lock::LockError::Io { .. } => e.to_string(),
    }
}

/// Takes the database's lock for `command`, or refuses with who holds it and `advice`.
fn lock_db(
    db: &std::path::Path,
    command: &str,
    advice: &'static str,
) -> Result<lock::DbLock, CliError> {
    lock::DbLock::acquire(db, command).map_err(|e| CliError::Locked(e, advice))
}

impl CliError {
    /// A closed output pipe (`brain … | head`): the reader has what it wanted.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// Runs a parsed command line, writing its output to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<(), CliError> {
    let sync = cli.sync.into();
    let command = match cli.command {
        Some(c) => c,
        // No command: serve, with settings from the environment and defaults.
        None => Command::Serve(ServeOnly::parse_from(["brain"]).args),
    };
    match command {
        Command::Serve(args) => serve::run(cli.db, sync, args, out),
        Command::Migrate => migrate(cli.db, sync, out),
        Command::Chat(args) => chat::run(cli.db, sync, args, out),
        Command::Tools(cmd) => tools::run(cli.db, sync, cmd, out),
        Command::Backup { path } => backup(cli.db, sync, &path, out),
        Command::Sessions(cmd) => {
            if !cmd.writes() {
                // Never migrates or writes: a newer brain reading a database an older
                // server runs on must leave it as it is (SPEC §12).
                let db = db_path(cli.db)?;
                let store = open_read_only(&db, sync, OlderSchema::Refuse)?;
                return sessions::run(store, &db, cmd, out);
            }
            let db = resolve_db_path(cli.db)?;
            let lock = lock::DbLock::acquire(&db, "sessions");
            // A compaction, an import and a fork go through the server that holds the
            // database, if one does: it knows which attempt is running, and writes an
            // import between its own writes.
            let server = match &lock {
                Err(lock::LockError::Held {
                    holder: lock::Holder { url: Some(url), .. },
                    ..
                }) => Some(url.as_str()),
                _ => None,
            };
            match (&cmd, server) {
                (SessionsCommand::Compact { id, api_token, .. }, Some(url)) => {
                    return sessions::compact_on_server(url, id, api_token.as_deref(), out);
                }
                (
                    SessionsCommand::Import {
                        file,
                        from,
                        api_token,
                    },
                    Some(url),
                ) => return import::on_server(url, file, *from, api_token.as_deref(), out),
                (
                    SessionsCommand::Fork {
                        id,
                        at,
                        api_token,
                        json,
                    },
                    Some(url),
                ) => return fork::on_server(url, id, *at, api_token.as_deref(), *json, out),
                _ => {}
            }
            let _lock = lock.map_err(|e| {
                CliError::Locked(
                    e,
                    "stop it before you change sessions from the command line",
                )
            })?;
            sessions::run(open_at(&db, sync)?, &db, cmd, out)
        }
    }
}

/// The database path from `--db`/`BRAIN_DB` or the default.
fn db_path(db: Option<PathBuf>) -> Result<PathBuf, CliError> {
    match db {
        // Refused before any lock file or directory is made from it (it may hold a password).
        Some(p) => {
            store::target(&p)?;
            Ok(p)
        }
        None => config::default_db_path().ok_or(CliError::NoDataDir),
    }
}

/// The database path from `--db`/`BRAIN_DB` or the default, a file's directory created.
pub fn resolve_db_path(db: Option<PathBuf>) -> Result<PathBuf, CliError> {
    let path = db_path(db)?;
    let dir = store::db_file(&path)?.and_then(|f| f.parent());
    if let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| CliError::CreateDir {
            path: dir.to_owned(),
            source,
        })?;
    }
    Ok(path)
}

/// How this process shares the database `db` names with other servers.
fn coordinator(db: &std::path::Path) -> Result<Arc<dyn Coordinator>, CliError> {
    Ok(store::coordinator(db)?)
}

fn open_store(db: Option<PathBuf>, sync: SyncMode) -> Result<Store, CliError> {
    open_at(&resolve_db_path(db)?, sync)
}

/// Opens the store at an already resolved path.
fn open_at(path: &std::path::Path, sync: SyncMode) -> Result<Store, CliError> {
    Ok(Store::open(
        path,
        StoreOptions {
            sync,
            ..StoreOptions::default()
        },
    )?)
}

/// Opens an existing database for a command that only reads (nothing created or migrated).
fn open_read_only(
    path: &std::path::Path,
    sync: SyncMode,
    older: OlderSchema,
) -> Result<Store, CliError> {
    let options = StoreOptions {
        sync,
        ..StoreOptions::default()
    };
    Ok(Store::open_read_only(path, options, older)?)
}

fn backup(
    db: Option<PathBuf>,
    sync: SyncMode,
    path: &std::path::Path,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let db = db_path(db)?;
    // Refused before connecting: a database server has no file to copy.
    if store::db_file(&db)?.is_none() {
        return Err(StoreError::Refused(store::SERVER_BACKUP_REFUSED).into());
    }
    // A copy needs no particular schema: an older one is copied as it is (a backup before
    // `brain migrate` is the careful order); a newer one is refused like everywhere. The
    // store checks the copy whole before it answers.
    let store = open_read_only(&db, sync, OlderSchema::Accept)?;
    store.backup_to(path)?;
    writeln!(
        out,
        "backup of {} written to {} (integrity ok)",
        store.path().display(),
        path.display()
    )?;
    Ok(())
}

fn migrate(db: Option<PathBuf>, sync: SyncMode, out: &mut dyn Write) -> Result<(), CliError> {
    let path = resolve_db_path(db)?;
    let _lock = lock_db(&path, "migrate", "stop it before you migrate the database")?;
    let store = open_store(Some(path), sync)?;
    writeln!(
        out,
        "{}: schema at version {}",
        store.path().display(),
        store.schema_version()
    )?;
    Ok(())
}

/// A permission question's decision for a person, `deny by restart (brain restarted before
/// anyone answered)`: who decided, and why when it was not a person.
fn decided_words(decision: &str, by: &str) -> String {
    use crate::session::events::resolved_by;
    let why = match by {
        resolved_by::TIMEOUT => " (nobody answered in time)",
        resolved_by::STOP => " (the answer was stopped)",
        resolved_by::SHUTDOWN => " (brain shut down)",
        resolved_by::RESTART => " (brain restarted before anyone answered)",
        _ => "",
    };
    format!("{decision} by {by}{why}")
}
