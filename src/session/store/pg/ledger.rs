//! Ledger sums on PostgreSQL. (A placeholder until the PostgreSQL reads land.)

use postgres::GenericClient;

use crate::session::events::SessionId;
use crate::session::store::ledger::UsageReport;
use crate::session::store::{Result, StoreError};

pub fn usage(_c: &mut impl GenericClient, _session: Option<SessionId>) -> Result<UsageReport> {
    Err(StoreError::Refused("not yet on PostgreSQL"))
}
