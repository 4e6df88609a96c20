//! The schema's life: connection pragmas (in one place, for every connection) and the
//! embedded migrations from `migrations/sqlite`.
//!
//! A database whose schema is newer than this binary is refused before anything touches it:
//! an older brain must not write into a layout it does not understand.

use rusqlite::{Connection, OptionalExtension};

use super::maintenance::WAL_SIZE_LIMIT_BYTES;
use crate::config;
use crate::session::store::error::StoreError;
pub use crate::session::store::schema::HISTORY_TABLE;
use crate::session::store::schema::{newest_of, versions_of};
use crate::session::store::types::{Checkpoints, SyncMode};

mod embedded {
    refinery::embed_migrations!("migrations/sqlite");
}

/// The newest schema version this binary knows.
pub fn latest_version() -> i64 {
    newest_of(&embedded::migrations::runner())
}

/// Every embedded migration's version, oldest first.
pub fn versions() -> Vec<i64> {
    versions_of(&embedded::migrations::runner())
}

/// `PRAGMA synchronous`'s value for `sync`.
fn synchronous(sync: SyncMode) -> &'static str {
    match sync {
        SyncMode::Full => "FULL",
        SyncMode::Normal => "NORMAL",
    }
}

/// Settings every connection gets, writer or reader.
pub fn apply_common_pragmas(conn: &Connection, sync: SyncMode) -> rusqlite::Result<()> {
    conn.busy_timeout(config::BUSY_TIMEOUT)?;
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.pragma_update(None, "synchronous", synchronous(sync))?;
    Ok(())
}

/// The page size of a new database. An event's row lives in a B-tree keyed by
/// `(session_n, seq)` (`WITHOUT ROWID`), where a row over about a quarter of a page spills
/// into an overflow page of its own: with 4 KiB pages every answer over ~1 KB did, and the
/// overflow pages stood two-thirds empty (~220 of ~950 bytes per event on the benchmark
/// corpus, BENCHMARKS.md). At 16 KiB rows up to ~4 KB stay in their leaf.
pub const PAGE_SIZE_BYTES: i64 = 16_384;

/// Settings of the one writer connection. WAL is a property of the file; setting it here,
/// before the first write, makes a new database WAL from its first page. So is the page
/// size: it takes effect only on a new (empty) file and is ignored on an existing one.
/// With background checkpoints the writer never checkpoints (see [`super::maintenance`]).
pub fn apply_writer_pragmas(
    conn: &Connection,
    sync: SyncMode,
    checkpoints: Checkpoints,
) -> Result<(), StoreError> {
    apply_common_pragmas(conn, sync)?;
    conn.pragma_update(None, "page_size", PAGE_SIZE_BYTES)?;
    if checkpoints == Checkpoints::Background {
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    }
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT_BYTES)?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "wal", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Corrupt(format!(
            "the database refused WAL mode (journal_mode is {mode})"
        )));
    }
    Ok(())
}

/// Settings of reader connections: they may never write.
pub fn apply_reader_pragmas(conn: &Connection, sync: SyncMode) -> rusqlite::Result<()> {
    apply_common_pragmas(conn, sync)?;
    // Room for every list shape and a few search pages without re-preparing.
    conn.set_prepared_statement_cache_capacity(config::READER_STATEMENT_CACHE);
    conn.pragma_update(None, "query_only", true)
}

/// The schema version recorded in the database, 0 for a new one.
pub fn current_version(conn: &Connection) -> Result<i64, StoreError> {
    let has_history: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [HISTORY_TABLE],
        |r| r.get(0),
    )?;
    if !has_history {
        return Ok(0);
    }
    let version: Option<i64> = conn
        .query_row(
            &format!("SELECT MAX(version) FROM {HISTORY_TABLE}"),
            [],
            |r| r.get(0),
        )
        .optional()?
        .flatten();
    Ok(version.unwrap_or(0))
}

/// Brings the schema up to date; refuses a database newer than this binary. Returns how
/// many migrations were applied.
pub fn migrate(conn: &mut Connection) -> Result<usize, StoreError> {
    migrate_to(conn, None)
}

/// Like [`migrate`], stopping at `target` when given (tests step through versions).
pub fn migrate_to(conn: &mut Connection, target: Option<i64>) -> Result<usize, StoreError> {
    let found = current_version(conn)?;
    let supported = latest_version();
    if found > supported {
        return Err(StoreError::SchemaTooNew { found, supported });
    }
    let mut runner = embedded::migrations::runner().set_abort_divergent(true);
    if let Some(t) = target {
        let t = i32::try_from(t).map_err(|_| StoreError::Corrupt(format!("bad target {t}")))?;
        runner = runner.set_target(refinery::Target::Version(t));
    }
    let report = runner.run(conn)?;
    Ok(report.applied_migrations().len())
}

/// Names the SQLite file layout owns but the schema does not declare: FTS5 shadow tables,
/// SQLite's own tables, refinery's history. Used by schema comparisons.
pub fn is_internal_table(name: &str, virtual_tables: &[String]) -> bool {
    name.starts_with("sqlite_")
        || name == HISTORY_TABLE
        || virtual_tables
            .iter()
            .any(|v| name == v || name.starts_with(&format!("{v}_")))
}

/// The declared tables and their columns (generated ones included), as `table.column`
/// lines sorted by name: the shape `.ci/run` compares with PostgreSQL's.
pub fn table_columns(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table'")?;
    let tables: Vec<(String, String)> = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get::<_, Option<String>>(1)?.unwrap_or_default(),
            ))
        })?
        .collect::<Result<_, _>>()?;
    let virtual_tables: Vec<String> = tables
        .iter()
        .filter(|(_, sql)| sql.to_ascii_uppercase().starts_with("CREATE VIRTUAL TABLE"))
        .map(|(name, _)| name.clone())
        .collect();
    let mut out = Vec::new();
    for (table, _) in &tables {
        if is_internal_table(table, &virtual_tables) {
            continue;
        }
        let mut cols = conn.prepare("SELECT name FROM pragma_table_xinfo(?1)")?;
        for col in cols.query_map([table], |r| r.get::<_, String>(0))? {
            out.push(format!("{table}.{}", col?));
        }
    }
    out.sort();
    Ok(out)
}
