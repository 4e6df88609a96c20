//! The PostgreSQL store (SPEC §16): the same operations as the SQLite store, on a
//! `postgres://` URL. (Filled in by issue 21; for now the test support it needs.)

pub mod coord;
pub mod rows;
pub mod testdb;
