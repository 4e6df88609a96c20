//! The event log (SPEC §3): one [`Store`] ([`seam`]) on either database, chosen by the
//! one opener ([`open`]): SQLite ([`sqlite`], a file) or PostgreSQL ([`pg`], a URL).
//!
//! This module and its shared files hold what both databases share: the seam's traits,
//! the errors, the query and report types ([`list`], [`ledger`]), the write rules
//! ([`rules`]: fork, edit, import, create, rename, archive, written once over each
//! dialect's [`rules::Rows`]), the attempt mark and the coordination contract ([`coord`]).
//! `sqlite/` and `pg/` hold only their dialect's statements, row adapters and connection
//! handling, and import only these shared modules, never each other.
//!
//! **Architecture invariant:** brain's SQL is issued under `session::store` (and the
//! test-only fixtures beside it); the rest of brain sees [`Store`] and [`Writer`].

pub mod coord;
mod error;
pub mod ledger;
pub mod list;
mod mark;
mod open;
pub mod pg;
mod rules;
pub mod schema;
mod seam;
pub mod sqlite;
mod types;

pub use error::{Result, StoreError, connection_lost, detail};
pub use ledger::{CallStatus, LedgerEntry, Purpose, UsageReport, UsageTotals};
pub use list::{
    HitCopy, ListQuery, RANK_WINDOW, SNIPPET_TOKENS, SearchHit, SearchOrder, SearchQuery,
    SessionPage, Syntax,
};
pub use open::{
    BAD_URL_REFUSED, DbTarget, KEY_VALUE_REFUSED, SERVER_BACKUP_REFUSED, coordinator, db_file,
    is_key_value_conninfo, is_postgres_url, target,
};
pub use seam::{AttemptMark, Backend, Rerun, Store, WriteTxn, Writer};
pub use types::{Checkpoints, OlderSchema, SessionRow, StoreOptions, SyncMode};
