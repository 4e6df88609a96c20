//! The values both stores share: how a store is opened ([`StoreOptions`]), what a read-only
//! open accepts ([`OlderSchema`]), and a session's cache row ([`SessionRow`]).

use crate::clock::Clock;
use crate::config;
use crate::session::events::SessionId;

/// How hard a commit waits for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// A committed event survives power loss (fsync on every commit).
    #[default]
    Full,
    /// A committed event survives a process crash; power loss may lose the newest commits.
    Normal,
}

/// Who checkpoints the WAL (SQLite; PostgreSQL checkpoints itself).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checkpoints {
    /// The maintenance thread, on its own connection (see `sqlite/maintenance.rs`).
    #[default]
    Background,
    /// SQLite's auto-checkpoint on the committing writer: the behaviour before issue 19,
    /// kept for the benchmark that compares the two.
    OnCommit,
}

/// How to open a store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub sync: SyncMode,
    pub clock: Clock,
    pub readers: u32,
    /// Who checkpoints the WAL (writer stores only).
    pub checkpoints: Checkpoints,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            sync: SyncMode::Full,
            clock: Clock::system(),
            readers: config::READER_POOL_SIZE,
            checkpoints: Checkpoints::default(),
        }
    }
}

/// A session's cache row: what its log says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    pub id: SessionId,
    pub title: Option<String>,
    pub archived: bool,
    pub system: String,
    pub created_at: String,
    pub updated_at: String,
}

/// Whether a read-only open accepts a schema older than this binary's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OlderSchema {
    /// Refuse it: queries written for the current schema may not run on it.
    Refuse,
    /// Accept it: for commands that copy the file and read nothing (backup).
    Accept,
}
