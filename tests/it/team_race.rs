//! I7 across servers, the narrow race (issue 27, left open by the last release): an
//! attempt's claim check passes, its lock's connection dies, another server claims the
//! session and starts its turn, and only then does the first attempt's append reach the
//! database. Reproduced exactly: server A writes through a store that, once armed, runs
//! "B's turn starts" inside A's next write call, after A's check and before its append.

use std::path::Path;
use std::sync::{Arc, Mutex};

use brain::chat::frames::{EndStatus, Frame};
use brain::session::Store;
use brain::session::events::{Event, SessionId};
use brain::session::projection::page::Page;
use brain::session::store::ledger::UsageReport;
use brain::session::store::list::{ListQuery, SearchHit, SearchQuery, SessionPage};
use brain::session::store::{Backend, Rerun, Result, SessionRow, Writer};
use serde_json::json;

use crate::engine::{end, frames, wait_until};
use crate::support::MockLlm;
use crate::team::{
    admin, holder, nothing_of_a_after_bs_turn, numbered_words, session, team_with, terminate,
    until_text,
};

type Hook = Box<dyn FnOnce() + Send>;

/// The log as server A sees it: the same store, with a hook run once, at the start of the
/// next write after it is armed.
struct Hooked {
    log: Arc<Store>,
    hook: Arc<Mutex<Option<Hook>>>,
}

impl Backend for Hooked {
    fn write(&self, _: Rerun, f: &mut dyn FnMut(&mut Writer<'_>) -> Result<()>) -> Result<()> {
        let hook = self.hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        self.log.write(|w| f(w))
    }
    fn session(&self, id: SessionId) -> Result<SessionRow> {
        self.log.session(id)
    }
    fn last_seq(&self, id: SessionId) -> Result<u64> {
        self.log.last_seq(id)
    }
    fn events(&self, id: SessionId, after_seq: u64, limit: Option<u32>) -> Result<Vec<Event>> {
        self.log.events(id, after_seq, limit)
    }
    fn events_for_context(&self, id: SessionId) -> Result<Vec<Event>> {
        self.log.events_for_context(id)
    }
    fn transcript_page(
        &self,
        id: SessionId,
        before_seq: u64,
        limit: usize,
        active: Option<(u64, u32)>,
    ) -> Result<Page> {
        self.log.transcript_page(id, before_seq, limit, active)
    }
    fn permission_events(&self, id: SessionId, call_id: &str) -> Result<Vec<Event>> {
        self.log.permission_events(id, call_id)
    }
    fn questions_filed(&self) -> Result<Vec<(SessionId, Event)>> {
        self.log.questions_filed()
    }
    fn session_ids(&self) -> Result<Vec<SessionId>> {
        self.log.session_ids()
    }
    fn list_sessions(&self, q: &ListQuery) -> Result<SessionPage> {
        self.log.list_sessions(q)
    }
    fn search(&self, q: &SearchQuery) -> Result<Vec<SearchHit>> {
        self.log.search(q)
    }
    fn usage(&self, session: Option<SessionId>) -> Result<UsageReport> {
        self.log.usage(session)
    }
    fn backup_to(&self, target: &Path) -> Result<()> {
        self.log.backup_to(target)
    }
    fn path(&self) -> &Path {
        self.log.path()
    }
    fn clock(&self) -> &brain::clock::Clock {
        self.log.clock()
    }
    fn is_read_only(&self) -> bool {
        self.log.is_read_only()
    }
    fn schema_version(&self) -> i64 {
        self.log.schema_version()
    }
}

#[test]
fn a_turn_another_server_starts_between_a_claim_check_and_an_append_gets_nothing_after_it() {
    let mock = Arc::new(MockLlm::start(&[]));
    let hook: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(None));
    let armed = Arc::clone(&hook);
    let Some(t) = team_with("a_turn_another_server_starts_between", &mock, move |log| {
        Arc::new(Store::from_backend(Hooked { log, hook: armed }))
    }) else {
        return;
    };
    let t = Arc::new(t);
    let words = numbered_words(80);
    let id = session(&t);
    mock.script(json!({"kind": "stream", "text": words, "delay_ms": 60}));
    let mut on_a = t.a.send(id, "talk slowly", None).unwrap();
    let mut seen = until_text(&mut on_a);
    let Frame::Turn { turn, .. } = seen[0] else {
        panic!("{seen:?}")
    };
    // A's next write is a checkpoint, its claim just checked. Before it lands: A's lock
    // connection dies and B's turn starts (its message written, its answer running).
    let (b_started, on_b) = std::sync::mpsc::channel();
    let team = Arc::clone(&t);
    let for_b = Arc::clone(&mock);
    *hook.lock().unwrap() = Some(Box::new(move || {
        let mut admin = admin(&team);
        let pid = holder(&mut admin, id).expect("A holds the session");
        terminate(&mut admin, pid);
        wait_until("A's lock gone", || holder(&mut admin, id).is_none());
        for_b.script(json!({"kind": "stream", "text": "from b"}));
        let sub = team
            .b
            .send(id, "now b", None)
            .expect("B claims the free session");
        let _ = b_started.send(sub);
    }));
    let on_b = on_b
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("A wrote again and B's turn started");
    let on_b = frames(on_b);
    assert_eq!(end(&on_b).0, EndStatus::Completed, "{on_b:?}");
    seen.extend(frames(on_a));
    let (status, seq) = end(&seen);
    assert_eq!(status, EndStatus::Interrupted, "{seen:?}");
    assert_eq!(seq, None, "it wrote nothing once the session was another's");
    nothing_of_a_after_bs_turn(&t, id, turn, &seen);
    // Not a database failure (`internal`): it says why it stopped.
    assert!(seen.iter().any(|f| matches!(
        f,
        Frame::Error { message, .. } if message.contains("another server")
    )));
}
