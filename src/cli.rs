//! The command line: raw arguments (clap) and what each command does.
//!
//! Errors are returned as [`CliError`]; `main` prints them and picks the exit code.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config;
use crate::session::store::schema;
use crate::session::{Store, StoreError, StoreOptions, SyncMode};

/// brain: a local LLM chat server whose sessions survive anything.
#[derive(Debug, Parser)]
#[command(name = "brain", version, about, long_about = None)]
pub struct Cli {
    /// The database file [default: the platform data directory's brain/brain.db]
    #[arg(long, env = "BRAIN_DB", global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,

    /// How hard a commit waits for the disk: `full` survives power loss, `normal` only a
    /// crash of brain itself
    #[arg(long, env = "BRAIN_SYNC", global = true, value_enum, default_value_t = SyncArg::Full)]
    pub sync: SyncArg,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    Full,
    Normal,
}

impl From<SyncArg> for SyncMode {
    fn from(s: SyncArg) -> SyncMode {
        match s {
            SyncArg::Full => SyncMode::Full,
            SyncArg::Normal => SyncMode::Normal,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the database if needed, apply its migrations, and exit
    Migrate,
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Store(#[from] StoreError),
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
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Migrate => migrate(cli.db, cli.sync.into()),
    }
}

/// The database path from `--db`/`BRAIN_DB` or the default, its directory created.
pub fn resolve_db_path(db: Option<PathBuf>) -> Result<PathBuf, CliError> {
    let path = match db {
        Some(p) => p,
        None => config::default_db_path().ok_or(CliError::NoDataDir)?,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| CliError::CreateDir {
            path: dir.to_owned(),
            source,
        })?;
    }
    Ok(path)
}

fn migrate(db: Option<PathBuf>, sync: SyncMode) -> Result<(), CliError> {
    let path = resolve_db_path(db)?;
    let store = Store::open(
        &path,
        StoreOptions {
            sync,
            ..StoreOptions::default()
        },
    )?;
    println!(
        "{}: schema at version {}",
        store.path().display(),
        schema::latest_version()
    );
    Ok(())
}
