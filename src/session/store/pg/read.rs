//! Reads on PostgreSQL. (A placeholder until the PostgreSQL reads land.)

use postgres::GenericClient;

use crate::session::events::{Event, SessionId};
use crate::session::projection::page::Page;
use crate::session::store::{Result, SessionRow, StoreError};

const NOT_YET: StoreError = StoreError::Refused("not yet on PostgreSQL");

pub fn session(_c: &mut impl GenericClient, _id: SessionId) -> Result<SessionRow> {
    Err(NOT_YET)
}

pub fn last_seq(_c: &mut impl GenericClient, _id: SessionId) -> Result<u64> {
    Err(NOT_YET)
}

pub fn events(
    _c: &mut impl GenericClient,
    _id: SessionId,
    _after_seq: u64,
    _limit: Option<u32>,
) -> Result<Vec<Event>> {
    Err(NOT_YET)
}

pub fn events_for_context(_c: &mut impl GenericClient, _id: SessionId) -> Result<Vec<Event>> {
    Err(NOT_YET)
}

pub fn transcript_page(
    _c: &mut impl GenericClient,
    _id: SessionId,
    _before_seq: u64,
    _limit: usize,
    _active: Option<(u64, u32)>,
) -> Result<Page> {
    Err(NOT_YET)
}

pub fn session_ids(_c: &mut impl GenericClient) -> Result<Vec<SessionId>> {
    Err(NOT_YET)
}
