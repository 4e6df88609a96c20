//! The ledger: one row per provider call (SPEC §6), kept when its session is deleted, and
//! the usage sums the API reports.

use std::collections::BTreeMap;

use rusqlite::{Connection, params};

use super::{Result, SqliteStore, SqliteWriter};
use crate::session::events::{SessionId, Usage};

/// Why a provider was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Purpose {
    Chat,
    Summarize,
    Distill,
    Title,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Chat => "chat",
            Purpose::Summarize => "summarize",
            Purpose::Distill => "distill",
            Purpose::Title => "title",
        }
    }
}

/// How a provider call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallStatus {
    /// The call completed.
    Ok,
    /// The call failed (see the error code).
    Error,
    /// A stream ended early after some output (cut, idle, stopped, shutdown).
    Interrupted,
}

impl CallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Ok => "ok",
            CallStatus::Error => "error",
            CallStatus::Interrupted => "interrupted",
        }
    }
}

/// One provider call, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerEntry {
    pub session_id: Option<SessionId>,
    pub purpose: Purpose,
    pub provider: String,
    pub model: String,
    pub usage: Usage,
    pub latency_ms: u64,
    pub status: CallStatus,
    pub error_code: Option<String>,
}

/// Sums over ledger rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageTotals {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

/// Usage overall and per purpose (purposes with no calls are absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageReport {
    pub total: UsageTotals,
    pub by_purpose: BTreeMap<String, UsageTotals>,
}

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

impl SqliteStore {
    /// Records a provider call; returns its ledger id.
    pub fn record_call(&self, e: &LedgerEntry) -> Result<i64> {
        self.write(|w| w.record_call(e))
    }

    /// Usage sums for one session (its rows outlive it), or for everything.
    pub fn usage(&self, session: Option<SessionId>) -> Result<UsageReport> {
        let conn = self.reader()?;
        usage_by_purpose(&conn, session.map(|s| s.to_string()))
    }
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
        let total = &mut report.total;
        total.calls += t.calls;
        total.input_tokens += t.input_tokens;
        total.output_tokens += t.output_tokens;
        total.cache_read_tokens += t.cache_read_tokens;
        total.cache_write_tokens += t.cache_write_tokens;
        report.by_purpose.insert(purpose, t);
    }
    Ok(report)
}
