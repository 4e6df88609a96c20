//! What an attempt lets go of when it ends early (issue 27): a `/stop` behind a hung
//! provider frees its reader thread and the provider's connection at once, and a SIGTERM
//! while another process holds the database's write lock still sends the `end` frame and
//! exits within 10 s (SPEC §12).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::server::{Brain, agent, call, new_session, read_frames, stream};
use crate::support::{MockLlm, TempDb, wait_for};

/// The threads of process `pid`.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count)
}

fn streamed(mock: &MockLlm) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|r| r["stream"] == true)
        .collect()
}

#[test]
fn twenty_stops_behind_a_hung_provider_free_their_threads_and_connections() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &["--titles", "off"]);
    let pid = b.child.id();
    let id = new_session(&b);
    let path = format!("/v1/sessions/{id}/messages");
    // One turn first, so the threads started once (listing, maintenance) are counted.
    let (_, _, frames) = stream(&b, &path, json!({"message": "hello"}));
    assert_eq!(frames.last().unwrap()["status"], "completed", "{frames:?}");
    let baseline = threads(pid);
    assert!(baseline > 0, "no /proc/{pid}/task");
    for i in 0..20 {
        // Half hang before their headers (a stop before the first token), half after.
        let step = if i % 2 == 0 {
            json!({"kind": "stream", "hang_before_headers": true})
        } else {
            json!({"kind": "stream", "hang": true})
        };
        mock.script(step);
        let url = format!("{}{path}", b.url);
        let client = std::thread::spawn(move || {
            let resp = agent()
                .post(&url)
                .header("Content-Type", "application/json")
                .send(json!({"message": format!("hang {i}")}).to_string())
                .unwrap();
            read_frames(resp).2
        });
        wait_for(
            "the mock to receive the request",
            Duration::from_secs(20),
            || streamed(&mock).len() == i + 2,
        );
        let (status, _) = call(&b, "POST", &format!("/v1/sessions/{id}/stop"), None);
        assert_eq!(status, 202);
        let frames = client.join().unwrap();
        let end = frames.last().unwrap();
        assert_eq!(end["type"], "end", "{frames:?}");
        assert_eq!(end["status"], "failed", "{end}");
    }
    // Each stopped stream's reader thread ends and its connection closes; without the
    // fix both stay until the transport's read timeout (five minutes).
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let now = threads(pid);
        if now <= baseline + 2 {
            break;
        }
        assert!(
            Instant::now() < until,
            "{now} threads 20 s after 20 stops; {baseline} before them"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let closed = |r: &Value| r["_cancelled"] == true && r["_ended_ms"].is_u64();
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let open: Vec<Value> = streamed(&mock)
            .into_iter()
            .skip(1)
            .filter(|r| !closed(r))
            .collect();
        if open.is_empty() {
            break;
        }
        assert!(
            Instant::now() < until,
            "the mock still serves {} stopped requests 20 s on: {:?}",
            open.len(),
            open.iter()
                .map(|r| r["_arrived_ms"].clone())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_while_another_process_holds_the_write_lock_sends_the_end_and_exits_within_10_s() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let mut b = Brain::start(&db, &mock.url, &["--titles", "off"]);
    let id = new_session(&b);
    let words: Vec<String> = (0..600).map(|i| format!("word{i} ")).collect();
    mock.script(json!({"kind": "stream", "text": words.concat(), "chunks": 600, "delay_ms": 50}));
    let url = format!("{}/v1/sessions/{id}/messages", b.url);
    let client = std::thread::spawn(move || {
        let resp = agent()
            .post(&url)
            .header("Content-Type", "application/json")
            .send(json!({"message": "write a lot"}).to_string())
            .unwrap();
        read_frames(resp).2
    });
    let checkpoints = || {
        db.raw()
            .query_row(
                "SELECT COUNT(*) FROM session_events WHERE kind = 'pending_state'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap_or(0)
    };
    wait_for("a checkpoint", Duration::from_secs(20), || {
        checkpoints() > 0
    });
    // Another process's write transaction (this test's connection is one): brain's
    // writes wait for it, each up to its busy timeout, and fail.
    let holder = db.raw();
    holder.busy_timeout(Duration::from_secs(10)).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    b.signal("-TERM");
    let until = started + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = b.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < until,
            "SIGTERM with the database locked must exit within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    assert!(status.success(), "{status:?} after {took:?}");
    let frames = client.join().unwrap();
    let end = frames.iter().find(|f| f["type"] == "end");
    assert!(
        end.is_some_and(|e| e["status"] == "interrupted"),
        "the stream got no end frame ({took:?}): {:?}",
        frames.last()
    );
    holder.execute_batch("ROLLBACK").unwrap();
}
