use super::*;

fn all(json: &str) -> Vec<Result<Conversation, ReadError>> {
    read(json.as_bytes()).collect()
}

fn one_err(json: &str) -> ReadError {
    match all(json).into_iter().find_map(Result::err) {
        Some(e) => e,
        None => panic!("no error for {json}"),
    }
}

fn fixture() -> Vec<Conversation> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/import/openwebui.json"
    );
    let file = std::fs::File::open(path).expect("fixture");
    read(std::io::BufReader::new(file))
        .collect::<Result<_, _>>()
        .expect("fixture reads")
}

fn ts(s: &str) -> Option<Timestamp> {
    Some(s.parse().expect("timestamp"))
}

#[test]
fn the_fixture_reads_with_branches_models_and_seconds_or_millis() {
    let chats = fixture();
    assert_eq!(chats.len(), 3);
    let c = &chats[0];
    assert_eq!(c.source, Source::OpenWebUi);
    assert_eq!(c.id, "6f1c2a9e-0b1d-4c52-9a57-1e0d3f5b7a10");
    assert_eq!(c.title.as_deref(), Some("Sourdough starter"));
    assert_eq!(c.created_at, ts("2024-05-06T12:53:20Z"));
    assert_eq!(c.current.as_deref(), Some("a2"));
    let ids: Vec<&str> = c.messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, [SYSTEM_ID, "u1", "a1", "a1b", "u2", "a2"]);
    // The chat's system prompt is the root; the history's root hangs under it.
    assert_eq!(c.messages[0].role, Role::System);
    assert_eq!(c.messages[0].text, "You are a patient baker.");
    assert_eq!(c.messages[1].parent.as_deref(), Some(SYSTEM_ID));
    // Two answers to u1: a branch is just two children.
    assert_eq!(c.messages[2].parent.as_deref(), Some("u1"));
    assert_eq!(c.messages[3].parent.as_deref(), Some("u1"));
    assert_eq!(c.messages[3].role, Role::Assistant);
    assert_eq!(c.messages[3].model.as_deref(), Some("llama3.1:8b"));
    assert_eq!(c.messages[1].model, None, "a user message names no model");
    // Seconds and milliseconds both read as the same kind of instant.
    assert_eq!(c.messages[2].created_at, ts("2024-05-06T12:53:24Z"));
    assert_eq!(c.messages[3].created_at, ts("2024-05-06T12:53:50.123Z"));
}

#[test]
fn unicode_missing_timestamps_and_non_text_parts() {
    let chats = fixture();
    let c = &chats[1];
    assert_eq!(c.title.as_deref(), Some("Ünïcödé 🦀 — 日本語"));
    assert_eq!(c.messages.len(), 4, "no system prompt: nothing added");
    let [m1, m2, m3, m4] = &c.messages[..] else {
        panic!("four messages")
    };
    assert_eq!(
        m1.text,
        "Translate 'crab' 🦀 into Japanese; also: שלום, e\u{301}"
    );
    assert_eq!(m1.created_at, None);
    assert_eq!(
        m1.skipped,
        vec![("image".to_owned(), 1), ("file".to_owned(), 1)]
    );
    assert_eq!(m2.text, "蟹 (かに, kani)");
    assert_eq!(m3.text, "What is in this picture?");
    assert_eq!(m3.skipped, vec![("image_url".to_owned(), 1)]);
    assert_eq!(m4.text, "", "null content is an empty answer");
    assert_eq!(
        m4.model.as_deref(),
        Some("Qwen 2.5"),
        "an empty `model` falls back to `modelName`"
    );
    let empty = &chats[2];
    assert!(empty.messages.is_empty());
    assert_eq!(empty.current, None);
}

#[test]
fn empty_array_and_whitespace_are_fine() {
    assert!(all(" [ ] \n").is_empty());
    assert!(all("[]").is_empty());
}

fn chat_with(messages: &str, current: &str) -> String {
    format!(
        r#"[{{"id":"ok","chat":{{"history":{{"messages":{{}}}}}}}},
           {{"id":"c-2","title":"Bad one","chat":{{"history":{{"messages":{messages},"currentId":{current}}}}}}}]"#
    )
}

#[test]
fn hostile_chats_are_named_by_index_id_and_title() {
    let cases = [
        (
            chat_with(r#"{"a":{"role":"user","parentId":"zz"}}"#, "null"),
            "\"zz\"",
        ),
        (
            chat_with(
                r#"{"a":{"role":"user","parentId":"b"},"b":{"role":"user","parentId":"a"}}"#,
                "null",
            ),
            "cycle",
        ),
        (
            chat_with(r#"{"a":{"role":"user"},"a":{"role":"user"}}"#, "null"),
            "appears twice",
        ),
        (chat_with(r#"{"a":{"role":"user"}}"#, r#""b""#), "current"),
        (chat_with(r#"{"a":{"role":7}}"#, "null"), "invalid type"),
        (
            chat_with(r#"{"a":{"role":"wizard"}}"#, "null"),
            "unknown role",
        ),
        (chat_with(r#"{"a":{}}"#, "null"), "no role"),
        (
            chat_with(r#"{"a":{"role":"user","content":{}}}"#, "null"),
            "not text",
        ),
        (
            chat_with(r#"{"a":{"role":"user","timestamp":-5}}"#, "null"),
            "not a time",
        ),
        (
            chat_with(r#"{"a":{"id":"b","role":"user"}}"#, "null"),
            "says its id",
        ),
        (chat_with(r#"[]"#, "null"), "invalid type"),
    ];
    for (json, reason) in cases {
        let results = all(&json);
        assert!(results[0].is_ok(), "the first chat is fine: {json}");
        let e = one_err(&json);
        assert_eq!(e.index, 1, "{json}");
        assert_eq!(e.id.as_deref(), Some("c-2"), "{json}");
        assert!(e.reason.contains(reason), "{reason:?} in {e}");
    }
    let e = one_err(&chat_with(
        r#"{"a":{"role":"user","parentId":"zz"}}"#,
        "null",
    ));
    assert!(e.to_string().contains("“Bad one”"), "the title: {e}");
}

#[test]
fn missing_parts_of_a_chat() {
    let e = one_err(r#"[{"id":"x","chat":{}}]"#);
    assert!(e.reason.contains("chat.history"), "{e}");
    let e = one_err(r#"[{"id":"x"}]"#);
    assert!(e.reason.contains("no `chat`"), "{e}");
    let e = one_err(r#"[{"title":"t","chat":{"history":{}}}]"#);
    assert!(e.reason.contains("no `id`"), "{e}");
    // An id of the wrong type still names the chat.
    let e = one_err(r#"[{"id":5,"chat":{"history":{}}}]"#);
    assert_eq!(e.id.as_deref(), Some("5"));
}

#[test]
fn broken_files_stop_at_the_first_error() {
    for (json, reason) in [
        ("", "empty"),
        ("{}", "JSON array"),
        ("[1]", "not a JSON object"),
        (r#"[{"id":"a","chat":{"history":{}}}"#, "truncated"),
        (r#"[{"id":"a","chat":{"history":{}}},"#, "truncated"),
        (r#"[{"id":"a","chat":{"hist"#, "not valid JSON"),
        (
            r#"[{"id":"a","chat":{"history":{}}} {"#,
            "expected `,` or `]`",
        ),
        (r#"[{"id":"a","chat":{"history":{}}}] x"#, "after the end"),
    ] {
        let results = all(json);
        let e = results
            .iter()
            .find_map(|r| r.as_ref().err())
            .unwrap_or_else(|| panic!("no error for {json:?}"));
        assert!(e.reason.contains(reason), "{reason:?} for {json:?}: {e}");
        assert!(
            results.last().is_some_and(Result::is_err),
            "nothing after the error: {json:?}"
        );
    }
}

#[test]
fn chats_stream_one_at_a_time() {
    // A reader that fails once the first chat is consumed: the first chat still comes out,
    // so the reader did not slurp the whole input first.
    struct Then<'a>(&'a [u8], bool);
    impl std::io::Read for Then<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                if self.1 {
                    return Err(std::io::Error::other("disk on fire"));
                }
                return Ok(0);
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let first = br#"[{"id":"a","chat":{"history":{"messages":{}}}},"#;
    let mut it = read(std::io::BufReader::with_capacity(8, Then(first, true)));
    assert_eq!(
        it.next().and_then(Result::ok).map(|c| c.id),
        Some("a".into())
    );
    let e = it.next().and_then(Result::err).expect("the read error");
    assert!(e.reason.contains("disk on fire"), "{e}");
    assert!(it.next().is_none());
}

#[test]
fn epochs_in_seconds_and_millis() {
    assert_eq!(epoch(0.0), Ok(Timestamp::UNIX_EPOCH));
    assert_eq!(epoch(1_715_000_000.0), epoch(1_715_000_000_000.0));
    assert_eq!(
        epoch(1_715_000_000.5).map(|t| t.as_millisecond()),
        Ok(1_715_000_000_500)
    );
    assert!(epoch(f64::NAN).is_err());
    assert!(epoch(1e300).is_err());
}

#[test]
fn every_truncation_of_the_fixture_is_an_error_never_a_panic() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/import/openwebui.json"
    );
    let full = std::fs::read(path).expect("fixture");
    let end = full.iter().rposition(|b| *b == b']').expect("array end");
    for cut in 0..=end {
        let results: Vec<_> = read(&full[..cut]).collect();
        assert!(
            results.last().is_some_and(Result::is_err),
            "a file cut at byte {cut} must end in an error"
        );
        assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
    }
}

#[test]
fn a_ten_thousand_message_chat() {
    const N: usize = 10_000;
    let mut messages = serde_json::Map::new();
    for i in 0..N {
        let parent = if i == 0 {
            Value::Null
        } else {
            Value::String(format!("m{}", i - 1))
        };
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        messages.insert(
            format!("m{i}"),
            serde_json::json!({"id": format!("m{i}"), "parentId": parent, "role": role,
                "content": format!("message {i}"), "timestamp": 1_700_000_000 + i}),
        );
    }
    let chat = serde_json::json!([{"id": "long", "chat": {"history": {
        "messages": messages, "currentId": format!("m{}", N - 1)}}}]);
    let all: Vec<_> = read(chat.to_string().as_bytes())
        .collect::<Result<_, _>>()
        .expect("reads");
    assert_eq!(all[0].messages.len(), N);
    assert_eq!(all[0].messages[N - 1].text, format!("message {}", N - 1));
}

proptest::proptest! {
    /// Whatever the bytes, the reader ends (with at most one error, last) and never panics.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(
        proptest::sample::select(b"[]{},:\"0123456789 aeinrtu\\.-".to_vec()), 0..200)) {
        let results: Vec<_> = read(&bytes[..]).collect();
        let errors = results.iter().filter(|r| r.is_err()).count();
        proptest::prop_assert!(errors <= 1);
        if errors == 1 {
            proptest::prop_assert!(results.last().is_some_and(Result::is_err));
        }
    }
}

#[test]
fn the_shape_is_recognised() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/import/openwebui.json"
    );
    let v: Value = serde_json::from_slice(&std::fs::read(path).expect("fixture")).expect("json");
    assert!(looks_like(&v[0]));
    assert!(!looks_like(
        &serde_json::json!({"mapping": {}, "current_node": "x"})
    ));
    assert!(!looks_like(
        &serde_json::json!({"uuid": "u", "chat_messages": []})
    ));
}
