//! Test support: a fresh PostgreSQL database per test, in the server named by
//! `BRAIN_TEST_PG_URL` (`.ci/postgres-up` starts one and prints its URL). Without that
//! variable the PostgreSQL tests skip and say so; under `CI` they must run, so a missing
//! server fails them. Each database is dropped (with its connections) when the guard drops.

use postgres::{Client, NoTls};

/// The variable naming a PostgreSQL server the tests may create databases in.
pub const URL_VAR: &str = "BRAIN_TEST_PG_URL";

/// A database created for one test; dropped with it.
pub struct TestDb {
    /// A libpq-style URL of the fresh database, for `--db` or the store.
    pub url: String,
    admin_url: String,
    name: String,
}

/// A fresh, empty database, or `None` (after printing why) when no server is configured
/// outside CI. `test` names the caller in the skip message.
pub fn fresh(test: &str) -> Option<TestDb> {
    let Ok(admin_url) = std::env::var(URL_VAR) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: {URL_VAR} is not set, and under CI the PostgreSQL tests must run \
             (.ci/postgres-up starts a server and prints its URL)"
        );
        // Straight to the process's stderr: libtest captures `eprintln!` and shows a
        // passing test's output only with `--nocapture`, so the skip would be invisible.
        let line =
            format!("\nSKIPPED {test}: no PostgreSQL ({URL_VAR} unset; run .ci/postgres-up)\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        return None;
    };
    match create(&admin_url) {
        Ok(db) => Some(db),
        Err(e) => panic!("{test}: cannot create a database in {admin_url}: {e}"),
    }
}

/// A fresh, empty database in the server at `admin_url` (the benchmarks name their own
/// server), dropped with the guard.
pub fn create(admin_url: &str) -> Result<TestDb, postgres::Error> {
    let name = format!("brain_t_{}", uuid::Uuid::new_v4().simple());
    let mut admin = Client::connect(admin_url, NoTls)?;
    admin.batch_execute(&format!("CREATE DATABASE {name}"))?;
    Ok(TestDb {
        url: with_database(admin_url, &name),
        admin_url: admin_url.to_owned(),
        name,
    })
}

/// `url` with its database name replaced by `name` (query string kept).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_part = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{host_part}/{name}?{q}"),
        None => format!("{host_part}/{name}"),
    }
}

#[cfg(test)]
fn connect(url: &str) -> Client {
    match Client::connect(url, NoTls) {
        Ok(c) => c,
        Err(e) => panic!("cannot connect to the test PostgreSQL at {url}: {e}"),
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Best effort: a failed drop leaves a stray database in a throwaway server.
        if let Ok(mut admin) = Client::connect(&self.admin_url, NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_only_the_name() {
        assert_eq!(
            with_database("postgres://u@h:5/postgres?sslmode=disable", "x"),
            "postgres://u@h:5/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h/db", "x"), "postgres://u@h/x");
        assert_eq!(with_database("postgres://u@h", "x"), "postgres://u@h/x");
    }

    #[test]
    fn a_fresh_database_accepts_connections_and_is_dropped() {
        let Some(db) = fresh("a_fresh_database_accepts_connections_and_is_dropped") else {
            return;
        };
        let mut c = connect(&db.url);
        let one: i32 = c.query_one("SELECT 1", &[]).map(|r| r.get(0)).unwrap_or(0);
        assert_eq!(one, 1);
        drop(c);
        let admin_url = db.admin_url.clone();
        let name = db.name.clone();
        drop(db);
        let mut admin = connect(&admin_url);
        let left = admin
            .query("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .map(|r| r.len())
            .unwrap_or(usize::MAX);
        assert_eq!(left, 0);
    }
}
