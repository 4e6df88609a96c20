//! One context budget (issue 27): the turn, `GET …/context` and `brain sessions compact`
//! compute the window, the output reserve with the tool definitions, and the trigger in
//! one place, so the page's numbers are the ones the turn compacts at.

use std::time::Duration;

use serde_json::{Value, json};

use crate::server::{Brain, call, new_session, stream};
use crate::support::{MockLlm, TempDb, run_brain_on, wait_for};

/// The session's compactions (`compaction_applied` payloads), oldest first.
fn compactions(b: &Brain, id: &str) -> Vec<Value> {
    let (_, events) = call(b, "GET", &format!("/v1/sessions/{id}/events"), None);
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "compaction_applied")
        .map(|e| e["payload"].clone())
        .collect()
}

/// The budget's settings, the same for the server and `sessions compact`.
const BUDGET: &[&str] = &[
    "--tools",
    "on",
    "--context-window",
    "2000",
    "--max-output-tokens",
    "600",
    "--compact-at",
    "0.9",
];

#[test]
fn context_compact_and_the_turn_agree_on_the_budget_with_tools_configured() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    // window 2000, 600 kept for the answer: without the tool definitions the trigger would
    // be 1400 (0.9 × 2000 is more).
    let mut serve = vec!["--titles", "off"];
    serve.extend(BUDGET);
    let b = Brain::start(&db, &mock.url, &serve);
    let id = new_session(&b);
    let path = format!("/v1/sessions/{id}/messages");
    let context = || call(&b, "GET", &format!("/v1/sessions/{id}/context"), None).1;
    let (_, _, frames) = stream(&b, &path, json!({"message": "hello"}));
    assert_eq!(frames.last().unwrap()["status"], "completed", "{frames:?}");
    let sent = mock.requests().pop().unwrap();
    assert!(sent["tools"].is_array(), "the turn offers search_history");
    let first = context();
    let trigger = first["trigger_tokens"].as_u64().unwrap();
    assert_eq!(first["window"], 2000);
    // Small turns (18 tokens each, fewer than the definitions' 100 or so) until the first
    // compaction: each context after a turn that did not compact is at most the trigger,
    // and the one that compacted was over it.
    let mut sizes = Vec::new();
    for i in 0.. {
        assert!(i < 200, "no compaction after 200 turns: {sizes:?}");
        let now = context()["tokens"].as_u64().unwrap();
        let step = if now + 200 < trigger {
            // Far from the trigger: a big step (about one token a word, or more).
            (trigger - now - 150) / 2
        } else {
            4
        };
        let words: Vec<String> = (0..step).map(|w| format!("w{w}")).collect();
        mock.script(json!({"kind": "stream", "text": "ok ok"}));
        let (_, _, frames) = stream(&b, &path, json!({"message": words.join(" ")}));
        assert_eq!(frames.last().unwrap()["type"], "end", "{frames:?}");
        // Read before looking for a compaction: a size read after one landed is not kept.
        let size = context()["tokens"].as_u64().unwrap();
        if frames.iter().any(|f| f["phase"] == "compacting") || !compactions(&b, &id).is_empty() {
            break;
        }
        sizes.push(size);
    }
    wait_for("the compaction", Duration::from_secs(20), || {
        !compactions(&b, &id).is_empty()
    });
    let compaction = &compactions(&b, &id)[0];
    let before = compaction["tokens_before"].as_u64().unwrap();
    assert!(
        before > trigger,
        "the turn compacted at {before} tokens, /context's trigger is {trigger} (sizes {sizes:?})"
    );
    // The context that compacted after its turn may have been read before it landed.
    let earlier = match sizes.split_last() {
        Some((&last, rest)) if last == before => rest,
        _ => &sizes[..],
    };
    assert!(
        earlier.iter().all(|&s| s <= trigger),
        "contexts over /context's trigger {trigger} were not compacted: {sizes:?}"
    );
    let tools = first["tools_tokens"].as_u64().unwrap_or(0);
    assert!(tools > 0, "/context counts the tool definitions: {first}");
    assert_eq!(trigger, 1400 - tools, "{first}");
    // `brain sessions compact` reports the same: through the server holding the database,
    // and in-process with the server's settings once it is gone.
    let expected = format!("window 2000 from --context-window, trigger {trigger})");
    let out = run_brain_on(&db, &["sessions", "compact", &id], b"");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&expected),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(b);
    let out = run_brain_on(
        &db,
        &[
            &["sessions", "compact", &id, "--provider-url", &mock.url],
            BUDGET,
        ]
        .concat(),
        b"",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&expected),
        "in-process: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
