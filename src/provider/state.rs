//! What the provider client remembers between calls, as pure decisions over a clock value:
//! the model listing (fresh, stale, failed, being fetched) and the latest observation of
//! the provider (the outcome of its last call or probe).
//!
//! The client keeps one [`State`] behind a mutex that is never held during I/O: a caller
//! decides here what to do, a fetch runs on its own thread, and its outcome comes back
//! through [`State::fetch_ended`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ModelInfo, ProviderError};

/// How long each remembered thing stays true.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ttls {
    /// A listing is reused this long before it is fetched again.
    pub listing: Duration,
    /// A failed fetch is remembered this long before the next one.
    pub failure: Duration,
    /// An observation older than this makes `/health` probe again.
    pub probe_after: Duration,
}

/// The outcome of the latest provider call or probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub at: Instant,
    /// `None` when the provider answered.
    pub error: Option<ProviderError>,
}

/// What a caller asking for the listing gets now.
#[derive(Debug, PartialEq, Eq)]
pub enum Listing {
    Answer(Result<Arc<Vec<ModelInfo>>, ProviderError>),
    /// Nothing known yet and nothing failed lately: wait for the fetch.
    Wait,
}

#[derive(Debug, Default)]
pub struct State {
    listing: Option<(Instant, Arc<Vec<ModelInfo>>)>,
    /// The last fetch's error, cleared by a successful one.
    failure: Option<(Instant, ProviderError)>,
    /// When the fetch in flight started; at most one runs at a time.
    fetching: Option<Instant>,
    /// How many fetches have ended, so a waiter knows its fetch is over.
    fetches_ended: u64,
    observed: Option<Observation>,
}

impl State {
    /// What a caller of `models` gets now, and whether it should start a fetch. A stale
    /// listing still answers (windows rarely change) while a fetch refreshes it; a recent
    /// failure answers as itself, so a hung provider is asked once per `ttls.failure`.
    pub fn listing(&self, now: Instant, ttls: Ttls) -> (Listing, bool) {
        let age = |at: Instant| now.saturating_duration_since(at);
        if let Some((at, list)) = &self.listing {
            if age(*at) < ttls.listing {
                return (Listing::Answer(Ok(Arc::clone(list))), false);
            }
        }
        let recent_failure = self
            .failure
            .as_ref()
            .filter(|(at, _)| age(*at) < ttls.failure);
        let fetch = self.fetching.is_none() && recent_failure.is_none();
        let answer = match (&self.listing, recent_failure) {
            (Some((_, list)), _) => Listing::Answer(Ok(Arc::clone(list))),
            (None, Some((_, e))) => Listing::Answer(Err(e.clone())),
            (None, None) => Listing::Wait,
        };
        (answer, fetch)
    }

    pub fn fetch_started(&mut self, now: Instant) {
        self.fetching = Some(now);
    }

    /// A fetch's outcome: the listing (or the failure) and an observation of the provider.
    pub fn fetch_ended(&mut self, now: Instant, result: Result<Vec<ModelInfo>, ProviderError>) {
        self.fetching = None;
        self.fetches_ended += 1;
        self.observe(now, result.as_ref().map(|_| ()));
        match result {
            Ok(list) => {
                self.listing = Some((now, Arc::new(list)));
                self.failure = None;
            }
            Err(e) => self.failure = Some((now, e)),
        }
    }

    /// When the fetch in flight started.
    pub fn fetching(&self) -> Option<Instant> {
        self.fetching
    }

    pub fn fetches_ended(&self) -> u64 {
        self.fetches_ended
    }

    /// For a caller that waited for a fetch: what it brought.
    pub fn last_outcome(&self) -> Result<Arc<Vec<ModelInfo>>, ProviderError> {
        match (&self.listing, &self.failure) {
            (Some((_, list)), _) => Ok(Arc::clone(list)),
            (None, Some((_, e))) => Err(e.clone()),
            (None, None) => Err(ProviderError::Unreachable("no model listing yet".into())),
        }
    }

    /// Records what a call saw. A cancelled call saw nothing; an answer the provider gave
    /// to a request it did not like (HTTP 4xx, an error object) shows it is there.
    pub fn observe(&mut self, now: Instant, outcome: Result<(), &ProviderError>) {
        let error = match outcome {
            Ok(()) => None,
            Err(ProviderError::Cancelled) => return,
            Err(e) if !shows_provider_down(e) => None,
            Err(e) => Some(e.clone()),
        };
        self.observed = Some(Observation { at: now, error });
    }

    pub fn observation(&self) -> Option<&Observation> {
        self.observed.as_ref()
    }

    /// Whether `/health` should probe: nothing in flight, and nothing observed within
    /// `ttls.probe_after`.
    pub fn wants_probe(&self, now: Instant, ttls: Ttls) -> bool {
        self.fetching.is_none()
            && self
                .observed
                .as_ref()
                .is_none_or(|o| now.saturating_duration_since(o.at) >= ttls.probe_after)
    }

    /// What `/health` says: reachable when the latest observation saw an answer. Nothing
    /// observed yet is not reachable: nothing has answered.
    pub fn reachable(&self) -> bool {
        self.observed.as_ref().is_some_and(|o| o.error.is_none())
    }
}

/// Whether an error says the provider is down (not answering, or answering that it is
/// broken), as opposed to refusing one request.
fn shows_provider_down(e: &ProviderError) -> bool {
    match e {
        ProviderError::Http { status, .. } => *status >= 500,
        ProviderError::Remote(_) | ProviderError::Cancelled | ProviderError::NoDescriptors(_) => {
            false
        }
        ProviderError::Unreachable(_)
        | ProviderError::Malformed(_)
        | ProviderError::Cut(_)
        | ProviderError::FirstTokenTimeout(_)
        | ProviderError::IdleTimeout(_)
        | ProviderError::Timeout(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTLS: Ttls = Ttls {
        listing: Duration::from_secs(30),
        failure: Duration::from_secs(5),
        probe_after: Duration::from_secs(5),
    };

    fn models(id: &str) -> Vec<ModelInfo> {
        vec![ModelInfo {
            id: id.into(),
            window: None,
            window_source: None,
        }]
    }

    fn down() -> ProviderError {
        ProviderError::Unreachable("refused".into())
    }

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    fn ids(answer: &Listing) -> Option<String> {
        match answer {
            Listing::Answer(Ok(list)) => Some(list[0].id.clone()),
            _ => None,
        }
    }

    #[test]
    fn nothing_known_waits_for_one_fetch() {
        let t0 = Instant::now();
        let mut s = State::default();
        assert_eq!(s.listing(t0, TTLS), (Listing::Wait, true));
        s.fetch_started(t0);
        assert_eq!(
            s.listing(t0, TTLS),
            (Listing::Wait, false),
            "one fetch in flight at a time"
        );
        s.fetch_ended(secs(t0, 1), Ok(models("a")));
        let (answer, fetch) = s.listing(secs(t0, 1), TTLS);
        assert_eq!((ids(&answer).as_deref(), fetch), (Some("a"), false));
    }

    #[test]
    fn a_stale_listing_answers_at_once_while_one_fetch_refreshes_it() {
        let t0 = Instant::now();
        let mut s = State::default();
        s.fetch_started(t0);
        s.fetch_ended(t0, Ok(models("a")));
        let (answer, fetch) = s.listing(secs(t0, 31), TTLS);
        assert_eq!((ids(&answer).as_deref(), fetch), (Some("a"), true));
        s.fetch_started(secs(t0, 31));
        let (answer, fetch) = s.listing(secs(t0, 32), TTLS);
        assert_eq!((ids(&answer).as_deref(), fetch), (Some("a"), false));
        s.fetch_ended(
            secs(t0, 41),
            Err(ProviderError::Timeout(Duration::from_secs(10))),
        );
        let (answer, fetch) = s.listing(secs(t0, 42), TTLS);
        assert_eq!(
            (ids(&answer).as_deref(), fetch),
            (Some("a"), false),
            "the last known listing, no new fetch while the failure is recent"
        );
        assert!(s.listing(secs(t0, 46), TTLS).1, "then a new fetch");
    }

    #[test]
    fn a_failure_is_remembered_briefly_then_fetched_again() {
        let t0 = Instant::now();
        let mut s = State::default();
        s.fetch_started(t0);
        s.fetch_ended(t0, Err(down()));
        assert_eq!(s.last_outcome(), Err(down()));
        assert_eq!(
            s.listing(secs(t0, 4), TTLS),
            (Listing::Answer(Err(down())), false)
        );
        assert_eq!(s.listing(secs(t0, 5), TTLS), (Listing::Wait, true));
        s.fetch_started(secs(t0, 5));
        s.fetch_ended(secs(t0, 6), Ok(models("b")));
        assert_eq!(s.fetches_ended(), 2);
        assert_eq!(s.last_outcome().map(|l| l[0].id.clone()), Ok("b".into()));
    }

    #[test]
    fn health_follows_the_latest_observation_whatever_the_listing_says() {
        let t0 = Instant::now();
        let mut s = State::default();
        assert!(!s.reachable(), "nothing observed: nothing answered");
        assert!(s.wants_probe(t0, TTLS));
        s.fetch_started(t0);
        assert!(!s.wants_probe(t0, TTLS), "a probe is in flight");
        s.fetch_ended(t0, Ok(models("a")));
        assert!(s.reachable());
        assert!(!s.wants_probe(secs(t0, 4), TTLS));
        // A chat fails: the fresh listing does not hide it.
        s.observe(secs(t0, 2), Err(&down()));
        assert!(!s.reachable());
        assert!(ids(&s.listing(secs(t0, 2), TTLS).0).is_some());
        assert!(s.wants_probe(secs(t0, 7), TTLS));
        s.observe(secs(t0, 8), Ok(()));
        assert!(s.reachable());
    }

    #[test]
    fn refusals_and_cancellations_do_not_mark_the_provider_down() {
        let t0 = Instant::now();
        let mut s = State::default();
        s.observe(t0, Ok(()));
        let refused = ProviderError::Http {
            status: 400,
            body: "context too long".into(),
        };
        for e in [refused, ProviderError::Remote("bad request".into())] {
            s.observe(t0, Err(&e));
            assert!(s.reachable(), "{e:?}");
        }
        s.observe(t0, Err(&down()));
        s.observe(secs(t0, 1), Err(&ProviderError::Cancelled));
        assert_eq!(
            s.observation().map(|o| o.at),
            Some(t0),
            "cancelled: not seen"
        );
        for e in [
            ProviderError::Http {
                status: 503,
                body: "loading".into(),
            },
            ProviderError::Timeout(Duration::from_secs(1)),
            ProviderError::Cut("reset".into()),
            ProviderError::FirstTokenTimeout(Duration::from_secs(1)),
        ] {
            s.observe(t0, Ok(()));
            s.observe(t0, Err(&e));
            assert!(!s.reachable(), "{e:?}");
        }
    }
}
