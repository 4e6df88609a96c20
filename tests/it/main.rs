//! brain's integration tests, built as one binary (one link step on a 2-core machine).
//! Each module tests one edge for real: a real SQLite file, a real child process.

mod attempts;
mod background;
mod browser;
mod cli;
mod compaction;
mod crash;
mod edges;
mod edit_api;
mod edit_cli;
mod edit_store;
mod engine;
mod import;
mod import_llm;
mod import_openwebui;
mod ledger;
mod listing;
mod mcp;
mod migrations;
mod provider;
mod provider_health;
mod real_llm;
mod search;
mod server;
mod store;
mod support;
mod terminal;
mod tools_chat;
mod tools_faults;
mod tools_loop;
mod tools_real;
mod tools_registry;
mod tools_wire;
mod transcript;
mod transcript_pages;
mod weak_model;
