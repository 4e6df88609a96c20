//! brain: a local-first LLM chat server whose sessions are append-only event logs.
//!
//! # Layout
//!
//! The crate is a functional core in an imperative shell (see `ARCHITECTURE.md`):
//!
//! - [`session::events`]: the event kinds and their payloads, as Rust types. Pure.
//! - [`session::store`]: the event log behind one `Store`, on SQLite (one writer
//!   connection, a reader pool) or PostgreSQL, chosen by one opener; where brain's SQL
//!   is issued (the `llm` importer reads that tool's own file).
//! - [`session::projection`]: the LLM context and the UI transcript, pure functions of
//!   the events.
//! - [`tokens`]: the token estimate (tiktoken o200k_base), cached by content.
//! - [`session::compactor`]: incremental compaction: `plan` (pure) and its runner.
//! - [`chat`]: the turn engine: attempts, frames, post-turn work, compaction by hand.
//! - [`api`]: the HTTP server: connections under deadlines and a cap, routes, SSE.
//! - [`provider`]: the OpenAI-compatible client, SSE parser and model listing; knows
//!   nothing of sessions.
//! - [`tools`]: tools inside a turn: the MCP client (stdio and Streamable HTTP).
//! - [`import`]: history from other tools (ChatGPT, Claude, Open WebUI, llm), §15.
//! - [`clock`]: the one clock; every timestamp brain writes is formatted there.
//! - [`config`]: named limits and defaults.
//! - [`logging`]: the log (levels, timestamps, `RUST_LOG`).
//! - [`cli`]: the command line (raw arguments) and what each command does.
//!
//! The binary (`src/main.rs`) only parses arguments, runs a command and maps errors to an
//! exit code.

pub mod api;
pub mod chat;
pub mod cli;
pub mod clock;
pub mod config;
pub mod import;
pub mod logging;
pub mod provider;
pub mod session;
pub mod tokens;
pub mod tools;
