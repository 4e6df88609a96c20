//! Tools on the wire (SPEC §13), the provider against `examples/mock_llm` as a real
//! process: calls streamed in pieces arrive whole, a step's calls and results go back
//! exactly, and a server that refuses `tools` still answers.

use std::time::Duration;

use brain::provider::{
    ChatRequest, ChatRole, ChatStream, Provider, ProviderConfig, ProviderError, Step, StreamEvent,
    ToolCall, ToolDef,
};
use serde_json::{Value, json};

use crate::support::MockLlm;

fn provider(mock: &MockLlm) -> Provider {
    let mut cfg = ProviderConfig::new(&mock.url);
    cfg.first_token_timeout = Duration::from_secs(10);
    cfg.idle_timeout = Duration::from_secs(10);
    Provider::new(cfg)
}

fn tools() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "fs__read_file".into(),
            description: "Reads a file.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}},
                "required": ["path"]}),
        },
        ToolDef {
            name: "time__now".into(),
            description: "The time.".into(),
            parameters: json!({"type": "object", "properties": {}}),
        },
    ]
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        model: "mock-model".into(),
        system: "You are a test.".into(),
        messages: vec![(ChatRole::User, text.into())],
        max_tokens: None,
        temperature: None,
        tools: tools(),
        tool_choice_none: false,
        steps: vec![],
    }
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

/// A stream's events in order, and its error.
fn drain(stream: &mut ChatStream) -> (Vec<StreamEvent>, Option<ProviderError>) {
    let mut events = Vec::new();
    for ev in stream {
        match ev {
            Ok(ev) => events.push(ev),
            Err(e) => return (events, Some(e)),
        }
    }
    (events, None)
}

fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn calls_of(events: &[StreamEvent]) -> Vec<Vec<ToolCall>> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCalls(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

const READ_ARGS: &str = r#"{"path": "/tmp/notes/today.md"}"#;

#[test]
fn two_calls_in_pieces_arrive_whole_then_the_next_step_carries_them_and_their_results() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(
        json!({"text": "Let me check.", "tool_call_pieces": 5, "tool_calls": [
            {"id": "call_read", "name": "fs__read_file", "arguments": READ_ARGS},
            {"name": "time__now", "arguments": "{}"},
        ]}),
    );
    let (events, error) = drain(&mut p.stream_chat(&ask("what did I write today?")));
    assert_eq!(error, None);
    assert_eq!(text_of(&events), "Let me check.");
    let expected = vec![
        call("call_read", "fs__read_file", READ_ARGS),
        call("call_1", "time__now", "{}"),
    ];
    assert_eq!(
        calls_of(&events),
        vec![expected.clone()],
        "once, both, intact"
    );
    let at = |want: fn(&StreamEvent) -> bool| events.iter().position(want);
    let calls_at = at(|e| matches!(e, StreamEvent::ToolCalls(_)));
    let finish_at = at(|e| matches!(e, StreamEvent::Finish(f) if f == "tool_calls"));
    assert!(
        calls_at.is_some() && calls_at < finish_at,
        "calls before Finish: {events:?}"
    );

    // Step 2: the same request plus the step; the mock quotes what it received.
    let mut second = ask("what did I write today?");
    second.steps = vec![Step {
        text: Some("Let me check.".into()),
        calls: expected,
        results: vec![
            ("call_read".into(), "Bought otter food.".into()),
            ("call_1".into(), "[the tool did not answer in 60 s]".into()),
        ],
    }];
    let (events, error) = drain(&mut p.stream_chat(&second));
    assert_eq!(error, None);
    assert_eq!(
        text_of(&events),
        "tool call_read: Bought otter food.\ntool call_1: [the tool did not answer in 60 s]"
    );
    assert!(calls_of(&events).is_empty());

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let (one, two) = (&requests[0], &requests[1]);
    assert_eq!(one["tools"], two["tools"]);
    assert_eq!(
        one["tools"][0],
        json!({"type": "function", "function": {"name": "fs__read_file",
            "description": "Reads a file.", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}}, "required": ["path"]}}})
    );
    assert!(one.get("tool_choice").is_none());
    let (m1, m2) = (
        one["messages"].as_array().unwrap(),
        two["messages"].as_array().unwrap(),
    );
    assert_eq!(m1[..], m2[..m1.len()], "step 2 extends step 1");
    assert_eq!(
        m2[m1.len()..],
        [
            json!({"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "call_read", "type": "function",
                    "function": {"name": "fs__read_file", "arguments": READ_ARGS}},
                {"id": "call_1", "type": "function",
                    "function": {"name": "time__now", "arguments": "{}"}},
            ]}),
            json!({"role": "tool", "tool_call_id": "call_read", "content": "Bought otter food."}),
            json!({"role": "tool", "tool_call_id": "call_1",
                "content": "[the tool did not answer in 60 s]"}),
        ]
    );
}

#[test]
fn the_last_step_says_tool_choice_none() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    let mut req = ask("hi");
    req.tool_choice_none = true;
    let (_, error) = drain(&mut p.stream_chat(&req));
    assert_eq!(error, None);
    assert_eq!(mock.requests()[0]["tool_choice"], "none");
}

#[test]
fn a_provider_that_refuses_tools_still_answers_and_is_sent_none_after() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    assert!(p.offers_tools("mock-model"));
    mock.script(json!({"reject_tools": true, "text": "A plain answer."}));
    let (events, error) = drain(&mut p.stream_chat(&ask("hello")));
    assert_eq!(error, None, "a chat never fails because of tools");
    assert_eq!(text_of(&events), "A plain answer.");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "refused once, then sent without tools");
    assert!(requests[0].get("tools").is_some());
    assert!(requests[1].get("tools").is_none() && requests[1].get("tool_choice").is_none());
    assert_eq!(requests[0]["messages"], requests[1]["messages"]);
    assert!(!p.offers_tools("mock-model"), "tool-less for a while");
    assert!(p.offers_tools("mock-vllm"), "per model");

    // Later requests for it carry no tools at all: one request, answered.
    mock.script(json!({"reject_tools": true, "text": "Again."}));
    let mut req = ask("again");
    req.tool_choice_none = true;
    let (events, error) = drain(&mut p.stream_chat(&req));
    assert_eq!((text_of(&events), error), ("Again.".to_owned(), None));
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[2].get("tools").is_none() && requests[2].get("tool_choice").is_none());
}

#[test]
fn other_http_errors_are_not_taken_for_a_refusal_of_tools() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(json!({"status": 400, "text": "context length exceeded"}));
    let (_, error) = drain(&mut p.stream_chat(&ask("hello")));
    assert!(
        matches!(error, Some(ProviderError::Http { status: 400, .. })),
        "{error:?}"
    );
    assert_eq!(mock.requests().len(), 1, "not sent again");
    assert!(p.offers_tools("mock-model"));
}

#[test]
fn malformed_arguments_and_unknown_names_pass_through_as_text() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    let bad = r#"{"path": "/tmp/x", oops"#;
    mock.script(json!({"tool_call_pieces": 7, "tool_calls": [
        {"id": "a", "name": "no_such_tool", "arguments": "{}"},
        {"id": "b", "name": "fs__read_file", "arguments": bad},
        {"id": "c", "name": "time__now", "arguments": ""},
    ]}));
    let (events, error) = drain(&mut p.stream_chat(&ask("go")));
    assert_eq!(error, None);
    assert_eq!(text_of(&events), "");
    assert_eq!(
        calls_of(&events),
        vec![vec![
            call("a", "no_such_tool", "{}"),
            call("b", "fs__read_file", bad),
            call("c", "time__now", ""),
        ]]
    );
}

#[test]
fn too_many_calls_are_cut_to_the_limit_and_the_stream_says_so() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    let many: Vec<Value> = (0..70)
        .map(|i| json!({"id": format!("c{i}"), "name": "time__now", "arguments": "{}"}))
        .collect();
    mock.script(json!({"tool_call_pieces": 1, "tool_calls": many}));
    let mut stream = p.stream_chat(&ask("go"));
    let (events, error) = drain(&mut stream);
    assert_eq!(error, None);
    let calls = calls_of(&events);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].len(), brain::config::MAX_TOOL_CALLS_PER_STEP);
    assert_eq!(calls[0][63].id, "c63");
    assert!(stream.tool_calls_overflowed());
}

#[test]
fn a_stream_cut_inside_a_call_is_an_error_without_calls() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(
        json!({"cut_after": 2, "tool_call_pieces": 3, "tool_calls": [
            {"id": "a", "name": "fs__read_file", "arguments": READ_ARGS},
        ]}),
    );
    let (events, error) = drain(&mut p.stream_chat(&ask("go")));
    assert!(matches!(error, Some(ProviderError::Cut(_))), "{error:?}");
    assert!(calls_of(&events).is_empty(), "no half call: {events:?}");
}

#[test]
fn a_whole_completion_carries_its_calls() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(json!({"kind": "complete", "tool_calls": [
        {"id": "x", "name": "time__now", "arguments": "{}"},
    ]}));
    let c = p
        .complete(&ask("go"), Duration::from_secs(10))
        .expect("a completion");
    assert_eq!(c.tool_calls, vec![call("x", "time__now", "{}")]);
    assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(c.text, "");
}
