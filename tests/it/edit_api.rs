//! Edit and fork through a real `brain serve` and mock_llm (SPEC §14, §7): what the model
//! is sent after an edit, every refusal's code, a concurrent edit and send, retry after an
//! edit, and a fork whose context is the source's byte for byte and whose first request
//! hits the prompt cache.

use std::sync::{Arc, Barrier};

use serde_json::{Value, json};

use crate::server::{Brain, agent, call, new_session, read_frames, stream, wait_for};
use crate::support::*;

fn send(b: &Brain, id: &str, body: Value) -> (u16, Vec<Value>) {
    let (status, _, frames) = stream(b, &format!("/v1/sessions/{id}/messages"), body);
    (status, frames)
}

fn context_texts(b: &Brain, id: &str) -> Vec<String> {
    let (_, ctx) = call(b, "GET", &format!("/v1/sessions/{id}/context"), None);
    ctx["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

fn items(b: &Brain, id: &str) -> Vec<Value> {
    call(b, "GET", &format!("/v1/sessions/{id}"), None).1["items"]
        .as_array()
        .unwrap()
        .clone()
}

fn user_seqs(b: &Brain, id: &str) -> Vec<u64> {
    items(b, id)
        .iter()
        .filter(|i| i["kind"] == "user")
        .map(|i| i["seq"].as_u64().unwrap())
        .collect()
}

fn edit(b: &Brain, id: &str, seq: Value, text: &str) -> (u16, Value) {
    call(
        b,
        "POST",
        &format!("/v1/sessions/{id}/messages"),
        Some(json!({"message": text, "edit_of": seq})),
    )
}

#[test]
fn an_edit_hides_the_branch_from_the_model_and_keeps_it_in_the_transcript() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let id = new_session(&b);
    for m in ["first question", "second question", "third question"] {
        assert_eq!(send(&b, &id, json!({"message": m})).0, 200);
    }
    let second = user_seqs(&b, &id)[1];
    let (status, frames) = send(
        &b,
        &id,
        json!({"message": "second, edited", "edit_of": second}),
    );
    assert_eq!(status, 200, "{frames:?}");
    assert_eq!(frames.last().unwrap()["status"], "completed");
    let turn = frames[0]["turn"].as_u64().unwrap();
    let texts = context_texts(&b, &id);
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert_eq!(texts[0], "first question");
    assert_eq!(texts[2], "second, edited");
    assert!(!texts.iter().any(|t| t.contains("third question")));
    // The request the model got for the edit is the same conversation.
    let requests = mock.requests();
    let last = requests.last().unwrap();
    let sent: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(sent.last(), Some(&"second, edited"));
    assert!(!sent.contains(&"third question"));
    // Nothing dropped: the old versions are there, flagged; the rewind is an item.
    let all = items(&b, &id);
    let rewind = all.iter().find(|i| i["kind"] == "rewind").unwrap();
    assert_eq!(rewind["edited_seq"], second);
    assert_eq!(rewind["to_seq"], second - 1);
    assert_eq!(rewind["abandoned"], false);
    for i in &all {
        let seq = i["seq"].as_u64().unwrap();
        let hidden = seq >= second && seq < rewind["seq"].as_u64().unwrap();
        assert_eq!(i["abandoned"], hidden, "{i}");
    }
    assert!(
        all.iter()
            .any(|i| i["text"] == "third question" && i["abandoned"] == true)
    );
    // A retry after the edit retries the edited message, with exactly its request.
    let (status, _, frames) = stream(&b, &format!("/v1/sessions/{id}/retry"), json!({}));
    assert_eq!(status, 200);
    assert_eq!(
        (frames[0]["turn"].as_u64(), frames[0]["attempt"].as_u64()),
        (Some(turn), Some(2))
    );
    let requests = mock.requests();
    let n = requests.len();
    assert_eq!(requests[n - 1]["messages"], requests[n - 2]["messages"]);
}

#[test]
fn every_refused_edit_gets_its_code_and_writes_nothing() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let id = new_session(&b);
    for m in ["one", "two"] {
        assert_eq!(send(&b, &id, json!({"message": m})).0, 200);
    }
    let [u1, u2] = user_seqs(&b, &id)[..] else {
        panic!()
    };
    assert_eq!(edit(&b, &id, json!(u2), "two, v2").0, 200);
    let other = new_session(&b);
    for _ in 0..3 {
        send(&b, &other, json!({"message": "elsewhere"}));
    }
    let events = |b: &Brain| {
        call(b, "GET", &format!("/v1/sessions/{id}/events"), None).1["events"]
            .as_array()
            .unwrap()
            .len()
    };
    let before = events(&b);
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!(u2), 409, "not_editable"),     // hidden by the edit
        (json!(u1 + 1), 409, "not_editable"), // an answer
        (json!(1), 409, "not_editable"),      // session_started
        (json!(before as u64 + 1), 409, "not_editable"), // past the end
        (json!(12), 409, "not_editable"),     // a seq only the other session has
        (json!(0), 400, "bad_request"),
        (json!(-3), 400, "bad_request"),
        (json!("2"), 400, "bad_request"),
        (json!(2.5), 400, "bad_request"),
        (json!(u64::MAX), 400, "bad_request"),
        (json!(1e30), 400, "bad_request"),
        (json!([2]), 400, "bad_request"),
    ];
    for (seq, status, code) in cases {
        let (got, body) = edit(&b, &id, seq.clone(), "x");
        assert_eq!(
            (got, body["error"].as_str()),
            (status, Some(code)),
            "edit_of {seq}: {body}"
        );
    }
    // A blank message is refused before the edit is looked at.
    assert_eq!(edit(&b, &id, json!(u1), "  ").0, 400);
    // An unknown session is a 404.
    let (status, _) = edit(&b, "0192e4a0-7b1c-7d3e-8f00-123456789abc", json!(2), "x");
    assert_eq!(status, 404);
    assert_eq!(events(&b), before, "no refusal wrote anything");

    // Compacted away: compact by hand, then the first message is behind the boundary.
    for m in ["three", "four", "five"] {
        send(&b, &id, json!({"message": m}));
    }
    let (status, report) = call(&b, "POST", &format!("/v1/sessions/{id}/compact"), None);
    assert_eq!(
        (status, report["compacted"].as_bool()),
        (200, Some(true)),
        "{report}"
    );
    let (status, body) = edit(&b, &id, json!(u1), "one, v2");
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("not_editable")),
        "{body}"
    );

    // During a turn: turn_in_flight, as for any send (I7).
    mock.script(json!({"kind": "stream", "hang": true}));
    let (url, path) = (b.url.clone(), format!("/v1/sessions/{id}/messages"));
    let hanging = std::thread::spawn(move || {
        read_frames(
            agent()
                .post(&format!("{url}{path}"))
                .header("Content-Type", "application/json")
                .send(json!({"message": "hang"}).to_string())
                .unwrap(),
        )
    });
    wait_for("the hanging turn", || {
        call(&b, "GET", &format!("/v1/sessions/{id}"), None).1["session"]["turn_active"] == true
    });
    let newest = *user_seqs(&b, &id).last().unwrap();
    let (status, body) = edit(&b, &id, json!(newest), "x");
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("turn_in_flight"))
    );
    assert_eq!(
        call(&b, "POST", &format!("/v1/sessions/{id}/stop"), None).0,
        202
    );
    hanging.join().unwrap();
}

#[test]
fn a_concurrent_edit_and_send_one_wins_and_no_rewind_is_half_written() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let id = new_session(&b);
    send(&b, &id, json!({"message": "one"}));
    let mut edits_won = 0;
    for round in 0..3 {
        let target = *user_seqs(&b, &id).last().unwrap();
        // Whichever wins answers slowly, so the other surely meets its turn.
        mock.script(json!([
            {"kind": "stream", "text": "a b c d e f g h", "chunks": 8, "delay_ms": 150},
        ]));
        let barrier = Arc::new(Barrier::new(2));
        let go = |body: Value| {
            let (url, path, barrier) = (
                b.url.clone(),
                format!("/v1/sessions/{id}/messages"),
                Arc::clone(&barrier),
            );
            std::thread::spawn(move || {
                barrier.wait();
                let resp = agent()
                    .post(&format!("{url}{path}"))
                    .header("Content-Type", "application/json")
                    .send(body.to_string())
                    .unwrap();
                let status = resp.status().as_u16();
                let text = resp.into_body().read_to_string().unwrap_or_default();
                (status, text)
            })
        };
        let e = go(json!({"message": format!("edit {round}"), "edit_of": target}));
        let s = go(json!({"message": format!("send {round}")}));
        let (e, s) = (e.join().unwrap(), s.join().unwrap());
        let mut statuses = [e.0, s.0];
        statuses.sort();
        assert_eq!(statuses, [200, 409], "edit {e:?}, send {s:?}");
        let loser = if e.0 == 409 { &e.1 } else { &s.1 };
        assert!(loser.contains("turn_in_flight"), "{loser}");
        edits_won += usize::from(e.0 == 200);
        // Leave no scripted step behind for the next round.
        mock.script(json!([]));
    }
    let (_, events) = call(&b, "GET", &format!("/v1/sessions/{id}/events"), None);
    let events = events["events"].as_array().unwrap();
    let rewinds: Vec<usize> = (0..events.len())
        .filter(|i| events[*i]["kind"] == "rewind")
        .collect();
    assert_eq!(rewinds.len(), edits_won);
    for i in rewinds {
        assert_eq!(
            events[i + 1]["kind"],
            "user_message",
            "a rewind stands with its message"
        );
    }
}

#[test]
fn a_fork_has_the_sources_context_byte_for_byte_and_hits_the_prompt_cache() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let (_, s) = call(&b, "POST", "/v1/sessions", Some(json!({"title": "plans"})));
    let id = s["id"].as_str().unwrap().to_owned();
    for m in [
        "where shall we go in spring",
        "and what about the summer holidays",
    ] {
        send(&b, &id, json!({"message": m}));
    }
    let second = user_seqs(&b, &id)[1];
    send(
        &b,
        &id,
        json!({"message": "the summer, again", "edit_of": second}),
    );
    let (_, source_ctx) = call(&b, "GET", &format!("/v1/sessions/{id}/context"), None);
    let (status, fork) = call(&b, "POST", &format!("/v1/sessions/{id}/fork"), None);
    assert_eq!(status, 201, "{fork}");
    assert_eq!(fork["title"], "plans (fork)");
    assert_eq!(fork["turn_active"], false);
    let fid = fork["id"].as_str().unwrap().to_owned();
    assert_ne!(fid, id);
    let (_, fork_ctx) = call(&b, "GET", &format!("/v1/sessions/{fid}/context"), None);
    assert_eq!(
        fork_ctx.to_string(),
        source_ctx.to_string(),
        "the fork's context is the source's, byte for byte"
    );
    // Events 2…S are the source's, byte for byte; seq 1 says where it came from.
    let (_, src_events) = call(&b, "GET", &format!("/v1/sessions/{id}/events"), None);
    let (_, fork_events) = call(&b, "GET", &format!("/v1/sessions/{fid}/events"), None);
    let (src_events, fork_events) = (
        src_events["events"].as_array().unwrap(),
        fork_events["events"].as_array().unwrap(),
    );
    assert_eq!(fork_events[1..], src_events[1..]);
    let from = &fork_events[0]["payload"]["forked_from"];
    assert_eq!(from["session_id"], id.as_str());
    assert_eq!(from["seq"], src_events.len());
    // The fork is its own session in the list, under its title.
    let (_, list) = call(&b, "GET", "/v1/sessions", None);
    let titles: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["title"].as_str())
        .collect();
    assert!(
        titles.contains(&"plans (fork)") && titles.contains(&"plans"),
        "{titles:?}"
    );
    // Its first request reuses the source's prompt: a cache hit.
    let (status, frames) = send(&b, &fid, json!({"message": "in the fork now"}));
    assert_eq!(status, 200);
    let end = frames.last().unwrap();
    assert!(
        end["usage"]["cache_read_tokens"].as_u64().unwrap() > 0,
        "the fork's first request hits the cache: {end}"
    );
    // The source is untouched.
    let (_, after) = call(&b, "GET", &format!("/v1/sessions/{id}/context"), None);
    assert_eq!(after, source_ctx);

    // Bad points: 0, past the end, wrong types; a fork at an earlier seq is fine.
    let fork_at = |through: Value| {
        call(
            &b,
            "POST",
            &format!("/v1/sessions/{id}/fork"),
            Some(json!({"through_seq": through})),
        )
    };
    for bad in [
        json!(0),
        json!(src_events.len() + 1),
        json!(-1),
        json!("3"),
        json!(u64::MAX),
    ] {
        let (status, body) = fork_at(bad.clone());
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("bad_request")),
            "{bad}: {body}"
        );
    }
    let (status, early) = fork_at(json!(3));
    assert_eq!(status, 201);
    let eid = early["id"].as_str().unwrap();
    let (_, e) = call(&b, "GET", &format!("/v1/sessions/{eid}/events"), None);
    assert_eq!(e["events"].as_array().unwrap().len(), 3);
    let (status, _) = call(
        &b,
        "POST",
        "/v1/sessions/0192e4a0-7b1c-7d3e-8f00-123456789abc/fork",
        None,
    );
    assert_eq!(status, 404);
}

/// A retry never resends a message an edit replaced: in a fork cut right after the
/// edit's rewind (before its new message), the newest message the model sees is the
/// first one, so that is what is retried (found by an outside review: the hidden second
/// message was resent and its answer merged into the context).
#[test]
fn a_retry_after_a_rewind_retries_the_newest_visible_message() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let id = new_session(&b);
    for m in ["q one", "q two"] {
        assert_eq!(send(&b, &id, json!({"message": m})).0, 200);
    }
    let (status, _, frames) = stream(
        &b,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "q two, better", "edit_of": 4}),
    );
    assert_eq!(status, 200, "{frames:?}");
    let rewind = items(&b, &id)
        .into_iter()
        .find(|i| i["kind"] == "rewind")
        .unwrap();
    let (status, fork) = call(
        &b,
        "POST",
        &format!("/v1/sessions/{id}/fork"),
        Some(json!({"through_seq": rewind["seq"]})),
    );
    assert_eq!(status, 201, "{fork}");
    let fork = fork["id"].as_str().unwrap().to_owned();
    assert_eq!(context_texts(&b, &fork).len(), 2, "q one and its answer");
    let (status, _, frames) = stream(&b, &format!("/v1/sessions/{fork}/retry"), json!({}));
    assert_eq!(status, 200);
    assert_eq!(frames[0]["turn"], 2, "{frames:?}");
    let sent = mock
        .requests()
        .into_iter()
        .rfind(|r| r["stream"] == true)
        .unwrap();
    assert!(!sent.to_string().contains("q two"), "{sent}");
    let ctx = context_texts(&b, &fork);
    assert_eq!(ctx.len(), 2, "{ctx:?}");
    assert!(!ctx.iter().any(|m| m.contains("q two")), "{ctx:?}");
}
