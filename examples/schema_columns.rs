//! Prints the SQLite schema's tables and columns as sorted `table.column` lines, for a
//! fresh database with every migration applied (FTS5 shadow tables and refinery's history
//! left out). `.ci/run` compares this with the same list read from a PostgreSQL that
//! applied `migrations/postgres`, to keep the two dialects in step.
//!
//! `cargo run --example schema_columns`

use std::process::ExitCode;

use brain::session::store::sqlite::schema;
use brain::session::{Store, StoreOptions};

fn main() -> ExitCode {
    match run() {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("schema_columns: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("schema.db");
    let store = Store::open(&path, StoreOptions::default())?;
    drop(store);
    let conn = rusqlite::Connection::open(&path)?;
    let lines = schema::table_columns(&conn)?;
    Ok(lines)
}
