//! Listing and search on PostgreSQL. (A placeholder until the PostgreSQL reads land.)

use postgres::GenericClient;

use crate::session::store::list::{ListQuery, SearchHit, SearchQuery, SessionPage};
use crate::session::store::{Result, StoreError};

pub fn list_sessions(_c: &mut impl GenericClient, _q: &ListQuery) -> Result<SessionPage> {
    Err(StoreError::Refused("not yet on PostgreSQL"))
}

pub fn search(_c: &mut impl GenericClient, _q: &SearchQuery) -> Result<Vec<SearchHit>> {
    Err(StoreError::Refused("not yet on PostgreSQL"))
}
