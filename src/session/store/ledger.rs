//! The ledger: one row per provider call (SPEC §6), kept when its session is deleted, and
//! the usage sums the API reports. The statements are each dialect's
//! (`sqlite/ledger.rs`, `pg/ledger.rs`).

use std::collections::BTreeMap;

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

impl UsageReport {
    /// Adds one purpose's sums (each purpose once) to the report and its total.
    pub fn add(&mut self, purpose: String, t: UsageTotals) {
        let total = &mut self.total;
        total.calls += t.calls;
        total.input_tokens += t.input_tokens;
        total.output_tokens += t.output_tokens;
        total.cache_read_tokens += t.cache_read_tokens;
        total.cache_write_tokens += t.cache_write_tokens;
        self.by_purpose.insert(purpose, t);
    }
}
