//! brain's integration tests, built as one binary (one link step on a 2-core machine).
//! Each module tests one edge for real: a real SQLite file, a real child process.

mod crash;
mod migrations;
mod store;
mod support;
