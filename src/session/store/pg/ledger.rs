//! The ledger's usage sums on PostgreSQL: the same report as SQLite's
//! (`sqlite/ledger.rs`).

use postgres::GenericClient;

use crate::session::events::SessionId;
use crate::session::store::error::{Result, StoreError};
use crate::session::store::ledger::{UsageReport, UsageTotals};

/// `SUM(bigint)` is `numeric` in PostgreSQL: cast back (a sum past bigint is an error, not
/// a silent wrap). `$1` NULL sums every row; the custom plan folds it away otherwise, so
/// one session's rows are found through `ledger_by_session`.
const USAGE: &str = "SELECT purpose, COUNT(*), SUM(input_tokens)::bigint,
        SUM(output_tokens)::bigint, SUM(cache_read_tokens)::bigint,
        SUM(cache_write_tokens)::bigint
     FROM ledger WHERE $1::uuid IS NULL OR session_id = $1
     GROUP BY purpose ORDER BY purpose";

/// Usage sums for one session (its rows outlive it), or for everything.
pub fn usage(c: &mut impl GenericClient, session: Option<SessionId>) -> Result<UsageReport> {
    let session = session.map(|s| s.as_uuid());
    let mut report = UsageReport::default();
    for r in c.query(USAGE, &[&session])? {
        let n = |i: usize| -> Result<u64> {
            let v: i64 = r.try_get(i)?;
            u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("a negative sum ({v})")))
        };
        let t = UsageTotals {
            calls: n(1)?,
            input_tokens: n(2)?,
            output_tokens: n(3)?,
            cache_read_tokens: n(4)?,
            cache_write_tokens: n(5)?,
        };
        report.add(r.try_get(0)?, t);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::events::Usage;
    use crate::session::store::ledger::{CallStatus, LedgerEntry, Purpose};
    use crate::session::store::pg::fixture::twin;
    use crate::session::testlog::Log;

    fn call(session: Option<SessionId>, purpose: Purpose, tokens: u64) -> LedgerEntry {
        LedgerEntry {
            session_id: session,
            purpose,
            provider: "mock".into(),
            model: "m".into(),
            usage: Usage {
                input_tokens: tokens,
                output_tokens: tokens * 2,
                cache_read_tokens: tokens * 3,
                cache_write_tokens: tokens * 5,
            },
            latency_ms: 7,
            status: CallStatus::Ok,
            error_code: None,
        }
    }

    /// Sums per purpose and in total, for one session and for all (rows without a session
    /// counted only in the total), equal to SQLite's on the same ledger.
    #[test]
    fn usage_sums_equal_sqlites() {
        let Some(mut t) = twin("usage_sums_equal_sqlites") else {
            return;
        };
        let a = t.import(&Log::new("s").events);
        let b = t.import(&Log::new("s").events);
        let empty = t.import(&Log::new("s").events);
        t.record_call(&call(Some(a), Purpose::Chat, 10));
        t.record_call(&call(Some(a), Purpose::Chat, 1));
        t.record_call(&call(Some(a), Purpose::Title, 100));
        t.record_call(&call(Some(b), Purpose::Summarize, 1_000));
        t.record_call(&call(None, Purpose::Distill, 3_000_000_000));
        for session in [None, Some(a), Some(b), Some(empty)] {
            let pg = usage(&mut t.pg, session).unwrap();
            assert_eq!(pg, t.sqlite.usage(session).unwrap(), "{session:?}");
        }
        let all = usage(&mut t.pg, None).unwrap();
        assert_eq!(all.total.calls, 5);
        assert_eq!(
            all.total.cache_write_tokens,
            (11 + 100 + 1_000 + 3_000_000_000) * 5
        );
        let of_a = usage(&mut t.pg, Some(a)).unwrap();
        assert_eq!(of_a.by_purpose["chat"].output_tokens, 22);
        assert_eq!(of_a.by_purpose.len(), 2);
        assert_eq!(
            usage(&mut t.pg, Some(empty)).unwrap(),
            UsageReport::default()
        );
    }
}
