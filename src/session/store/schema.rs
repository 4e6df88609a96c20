//! What both dialects' schemas share: refinery's history table, and the versions of an
//! embedded set of migrations (`migrations/sqlite`, `migrations/postgres`, each embedded
//! by its dialect).

/// refinery's history table (its default name).
pub const HISTORY_TABLE: &str = "refinery_schema_history";

/// Every version `runner` holds, oldest first.
pub fn versions_of(runner: &refinery::Runner) -> Vec<i64> {
    let mut v: Vec<i64> = runner
        .get_migrations()
        .iter()
        .map(|m| i64::from(m.version()))
        .collect();
    v.sort_unstable();
    v
}

/// The newest version `runner` holds (0 for none).
pub fn newest_of(runner: &refinery::Runner) -> i64 {
    versions_of(runner).last().copied().unwrap_or(0)
}
