//! brain's integration tests, built as one binary (one link step on a 2-core machine).
//! Each module tests one edge for real: a real SQLite file, a real child process.

mod attempts;
mod background;
mod browser;
mod budget;
mod chat_tty;
mod checkpoints;
mod cli;
mod compaction;
mod conformance;
mod consent;
mod crash;
mod edges;
mod edges_limits;
mod edit_api;
mod edit_cli;
mod edit_store;
mod engine;
mod import;
mod import_api;
mod import_llm;
mod import_openwebui;
mod ledger;
mod listing;
mod mcp;
mod mcp_hostile;
mod migrations;
mod pg_restart;
mod provider;
mod provider_health;
mod purge;
mod real_llm;
mod release;
mod search;
mod search_size;
mod server;
mod store;
mod support;
mod team;
mod team_e2e;
mod team_move;
mod team_race;
mod terminal;
/// A fresh PostgreSQL database per test (the library's own tests use the same file).
#[path = "../../src/session/store/pg/testdb.rs"]
mod testdb;
mod tools_chat;
mod tools_faults;
mod tools_loop;
mod tools_real;
mod tools_registry;
mod tools_wire;
mod transcript;
mod transcript_pages;
mod weak_model;
