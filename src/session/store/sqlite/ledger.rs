//! The ledger's statements on SQLite: a provider call's row, and the usage sums.

use rusqlite::{Connection, params};

use super::write::SqliteWriter;
use crate::session::events::SessionId;
use crate::session::store::error::Result;
use crate::session::store::ledger::{LedgerEntry, UsageReport, UsageTotals};

impl SqliteWriter<'_> {
    /// Records a provider call; returns its ledger id.
    pub fn record_call(&mut self, e: &LedgerEntry) -> Result<i64> {
        let now = self.clock().now_string();
        Ok(self
            .conn()
            .prepare_cached(
                "INSERT INTO ledger (session_id, purpose, provider, model, input_tokens,
                     output_tokens, cache_read_tokens, cache_write_tokens, latency_ms, status,
                     error_code, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
                 RETURNING id",
            )?
            .query_row(
                params![
                    e.session_id.map(|s| s.to_string()),
                    e.purpose.as_str(),
                    e.provider,
                    e.model,
                    e.usage.input_tokens,
                    e.usage.output_tokens,
                    e.usage.cache_read_tokens,
                    e.usage.cache_write_tokens,
                    e.latency_ms,
                    e.status.as_str(),
                    e.error_code,
                    now,
                ],
                |r| r.get(0),
            )?)
    }
}

/// Usage sums for one session (its rows outlive it), or for everything.
pub(super) fn usage(conn: &Connection, session: Option<SessionId>) -> Result<UsageReport> {
    usage_by_purpose(conn, session.map(|s| s.to_string()))
}

fn usage_by_purpose(conn: &Connection, session: Option<String>) -> Result<UsageReport> {
    let mut stmt = conn.prepare_cached(
        "SELECT purpose, COUNT(*), SUM(input_tokens), SUM(output_tokens),
                SUM(cache_read_tokens), SUM(cache_write_tokens)
         FROM ledger WHERE ?1 IS NULL OR session_id = ?1
         GROUP BY purpose ORDER BY purpose",
    )?;
    let rows = stmt.query_map([session], |r| {
        Ok((
            r.get::<_, String>(0)?,
            UsageTotals {
                calls: r.get(1)?,
                input_tokens: r.get(2)?,
                output_tokens: r.get(3)?,
                cache_read_tokens: r.get(4)?,
                cache_write_tokens: r.get(5)?,
            },
        ))
    })?;
    let mut report = UsageReport::default();
    for row in rows {
        let (purpose, t) = row?;
        report.add(purpose, t);
    }
    Ok(report)
}
