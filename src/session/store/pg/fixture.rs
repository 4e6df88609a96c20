//! Test support for the PostgreSQL reads: a fresh database with `migrations/postgres`
//! applied, and a twin SQLite store holding the same sessions (imported with their seqs,
//! payloads and timestamps), so a test can compare both stores' answers on the same data.

use postgres::{Client, NoTls};

use super::testdb::{TestDb, fresh};
use crate::session::events::{Event, SessionId};
use crate::session::store::ledger::LedgerEntry;
use crate::session::store::seam::Store;

/// Both stores, holding the same sessions. Fields drop in order: connection, then database.
pub struct Twin {
    pub pg: Client,
    pub sqlite: Store,
    _dir: tempfile::TempDir,
    _db: TestDb,
}

/// Every file of `migrations/postgres`, in version order. Read when the test runs, so a
/// migration added later is applied too.
fn migrations() -> Vec<(u32, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
    let mut files: Vec<(u32, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let version = name[1..name.find("__").unwrap()].parse().unwrap();
            (version, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    files.sort_by_key(|(v, _)| *v);
    files
}

/// A fresh, migrated PostgreSQL database and an empty SQLite store; `None` when the
/// PostgreSQL tests are skipped (see [`fresh`]).
pub fn twin(test: &str) -> Option<Twin> {
    let db = fresh(test)?;
    let mut pg = Client::connect(&db.url, NoTls).unwrap();
    for (_, sql) in migrations() {
        pg.batch_execute(&sql).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::open(&dir.path().join("twin.db"), Default::default()).unwrap();
    Some(Twin {
        pg,
        sqlite,
        _dir: dir,
        _db: db,
    })
}

const INSERT_SESSION: &str =
    "INSERT INTO sessions (id, title, archived, system, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5::text::timestamptz, $6::text::timestamptz)";
const INSERT_EVENT: &str = "INSERT INTO session_events (session_id, seq, kind, payload, created_at)
     VALUES ($1, $2, $3, $4::text::json, $5::text::timestamptz)";
const INSERT_CALL: &str = "INSERT INTO ledger (session_id, purpose, provider, model, input_tokens,
         output_tokens, cache_read_tokens, cache_write_tokens, latency_ms, status, error_code,
         created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now())";

impl Twin {
    /// Imports a session's whole log (seqs 1..n, `session_started` first) into both: SQLite
    /// through its import, PostgreSQL with plain INSERTs of the same events and of the
    /// cache row SQLite derived from them.
    pub fn import(&mut self, events: &[Event]) -> SessionId {
        let id = SessionId::generate();
        self.sqlite.write(|w| w.import_session(id, events)).unwrap();
        let row = self.sqlite.session(id).unwrap();
        let uuid = id.as_uuid();
        self.pg
            .execute(
                INSERT_SESSION,
                &[
                    &uuid,
                    &row.title,
                    &row.archived,
                    &row.system,
                    &row.created_at,
                    &row.updated_at,
                ],
            )
            .unwrap();
        for e in events {
            let seq = i64::try_from(e.seq).unwrap();
            self.pg
                .execute(
                    INSERT_EVENT,
                    &[&uuid, &seq, &e.kind, &e.payload, &e.created_at],
                )
                .unwrap();
        }
        id
    }

    /// Moves a session's `updated_at` in both stores (ties and orders in the list).
    pub fn set_updated_at(&mut self, id: SessionId, at: &str) {
        self.pg
            .execute(
                "UPDATE sessions SET updated_at = $2::text::timestamptz WHERE id = $1",
                &[&id.as_uuid(), &at],
            )
            .unwrap();
        let path = self.sqlite.path().to_owned();
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.execute(
            "UPDATE sessions SET updated_at = ?2 WHERE id = ?1",
            rusqlite::params![id.to_string(), at],
        )
        .unwrap();
    }

    /// Records a provider call in both ledgers.
    pub fn record_call(&mut self, e: &LedgerEntry) {
        self.sqlite.record_call(e).unwrap();
        let n = |v: u64| i64::try_from(v).unwrap();
        self.pg
            .execute(
                INSERT_CALL,
                &[
                    &e.session_id.map(|s| s.as_uuid()),
                    &e.purpose.as_str(),
                    &e.provider,
                    &e.model,
                    &n(e.usage.input_tokens),
                    &n(e.usage.output_tokens),
                    &n(e.usage.cache_read_tokens),
                    &n(e.usage.cache_write_tokens),
                    &n(e.latency_ms),
                    &e.status.as_str(),
                    &e.error_code,
                ],
            )
            .unwrap();
    }
}

/// Events compared by meaning: payloads as JSON values (a `jsonb` column reorders keys and
/// spacing; a `json` one keeps the text), the rest exactly.
pub fn same_events(pg: &[Event], sqlite: &[Event]) -> bool {
    let key = |e: &Event| {
        (
            e.seq,
            e.kind.clone(),
            serde_json::from_str::<serde_json::Value>(&e.payload).ok(),
            e.created_at.clone(),
        )
    };
    pg.len() == sqlite.len() && pg.iter().map(key).eq(sqlite.iter().map(key))
}
