//! Named limits and defaults, in one place. Units are the last word of each name.

use std::path::PathBuf;
use std::time::Duration;

/// How long a connection waits for the database lock before `SQLITE_BUSY`. Writes queue on
/// one writer connection, so this is only reached when another process holds the lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Reader connections in the pool. Readers never block on the writer (WAL).
pub const READER_POOL_SIZE: u32 = 4;

/// How long a request waits for a free reader connection.
pub const READER_WAIT: Duration = Duration::from_secs(10);

/// The database's file name inside the platform data directory's `brain/` folder.
pub const DEFAULT_DB_FILE_NAME: &str = "brain.db";

/// The default database path: the platform data directory, `brain/brain.db`
/// (`~/.local/share/brain/brain.db` on Linux). `None` when the platform has no data
/// directory (no home), in which case `--db` is required.
pub fn default_db_path() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("brain").join(DEFAULT_DB_FILE_NAME))
}
