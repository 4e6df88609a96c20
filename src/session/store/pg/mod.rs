//! The PostgreSQL store (SPEC §16): the same operations as the SQLite store, on a
//! `postgres://` URL. (Filled in by issue 21; for now the test support it needs.)

#[cfg(test)]
mod fixture;
pub mod ledger;
pub mod list;
pub mod read;
pub mod rows;
pub mod testdb;
