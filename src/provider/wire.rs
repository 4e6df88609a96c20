//! The OpenAI-compatible wire format, as pure functions: request bodies, stream chunks,
//! usage normalisation, and model listings with their context windows.

use serde_json::{Value, json};

use crate::session::events::Usage;

use super::toolcalls::{ToolCallPiece, pieces};
use super::{ChatRequest, ModelInfo, Shape, Step, ToolDef};

/// The `tools` array of a request, as sent.
pub fn tools_json(tools: &[super::ToolDef]) -> Value {
    Value::Array(tools.iter().map(tool_json).collect())
}

/// The request body of a chat completion. The tool steps follow `messages`, so each
/// step's request extends the previous one (I3); `tools` and `tool_choice` appear only
/// when tools are offered.
pub fn request_body(req: &ChatRequest, stream: bool) -> Value {
    let mut messages = Vec::with_capacity(req.messages.len() + 1 + 3 * req.steps.len());
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    for (role, content) in &req.messages {
        messages.push(json!({"role": role, "content": content}));
    }
    for step in &req.steps {
        step_messages(step, &mut messages);
    }
    let mut body = json!({"model": req.model, "messages": messages, "stream": stream});
    if !req.tools.is_empty() {
        body["tools"] = tools_json(&req.tools);
        if req.tool_choice_none {
            body["tool_choice"] = json!("none");
        }
    }
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    if let Some(n) = req.max_tokens {
        body["max_tokens"] = json!(n);
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    body
}

/// A tool as OpenAI function calling offers it.
fn tool_json(t: &ToolDef) -> Value {
    json!({"type": "function", "function": {
        "name": t.name, "description": t.description, "parameters": t.parameters,
    }})
}

/// A step as messages: the assistant's (its text or null, and its calls), then one `tool`
/// message per result.
fn step_messages(step: &Step, out: &mut Vec<Value>) {
    let mut assistant = json!({"role": "assistant", "content": step.text});
    if !step.calls.is_empty() {
        let calls: Vec<Value> = step
            .calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        assistant["tool_calls"] = Value::Array(calls);
    }
    out.push(assistant);
    for (id, content) in &step.results {
        out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
    }
}

/// The request body without its tools: for a model that refuses them.
pub fn without_tools(body: &mut Value) {
    if let Some(obj) = body.as_object_mut() {
        obj.remove("tools");
        obj.remove("tool_choice");
    }
}

/// Whether an HTTP error refuses the request's `tools` (so it is worth sending again
/// without them). A 400/422 that mentions tools or functions; a 5xx only with the words
/// of a known refusal, since llama.cpp without `--jinja` answers 500 ("tools param
/// requires --jinja flag", or "Unsupported param: tools" before that).
pub fn refuses_tools(status: u16, body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    match status {
        400 | 404 | 422 => body.contains("tool") || body.contains("function"),
        500 | 501 => [
            "tools param",
            "param: tools",
            "--jinja",
            "not support tools",
            "tool choice requires",
        ]
        .iter()
        .any(|w| body.contains(w)),
        _ => false,
    }
}

/// The request body of a shaped (background) completion: [`request_body`] plus `stop`
/// and `response_format` when the shape has them.
pub fn shaped_body(req: &ChatRequest, stream: bool, shape: &Shape) -> Value {
    let mut body = request_body(req, stream);
    if !shape.stop.is_empty() {
        body["stop"] = json!(shape.stop);
    }
    if let Some(s) = &shape.schema {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": s.name, "schema": s.schema},
        });
    }
    body
}

/// Whether an HTTP error answers a request with `response_format` by refusing structured
/// output itself (so the call is worth trying once more without it).
pub fn refuses_structured_output(status: u16, body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    matches!(status, 400 | 404 | 415 | 422 | 501)
        && ["response_format", "json_schema", "grammar"]
            .iter()
            .any(|w| body.contains(w))
}

/// What one stream chunk (or a whole non-streamed completion) carries.
#[derive(Debug, Default, PartialEq)]
pub struct ChunkParts {
    pub content: Option<String>,
    pub reasoning: Option<String>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// An `error` object some servers send inside the stream.
    pub error: Option<String>,
    /// `tool_calls` pieces (whole calls in a non-streamed completion).
    pub tool_calls: Vec<ToolCallPiece>,
}

/// Reads a chunk's JSON (`choices[0].delta` when streaming, `choices[0].message` when
/// not). `None` when it is not a JSON object.
pub fn parse_chunk(data: &str) -> Option<ChunkParts> {
    let v: Value = serde_json::from_str(data).ok()?;
    let obj = v.as_object()?;
    let mut parts = ChunkParts::default();
    if let Some(e) = obj.get("error") {
        parts.error = Some(
            e.get("message")
                .and_then(Value::as_str)
                .map_or_else(|| e.to_string(), str::to_owned),
        );
    }
    if let Some(choice) = obj.get("choices").and_then(|c| c.get(0)) {
        let whole = choice.get("delta").is_none();
        let delta = choice.get("delta").or_else(|| choice.get("message"));
        if let Some(d) = delta {
            if let Some(calls) = d.get("tool_calls") {
                parts.tool_calls = pieces(calls, whole);
            }
            parts.content = d.get("content").and_then(Value::as_str).map(str::to_owned);
            parts.reasoning = d
                .get("reasoning_content")
                .or_else(|| d.get("reasoning"))
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        parts.finish_reason = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    parts.usage = obj
        .get("usage")
        .filter(|u| u.is_object())
        .map(normalise_usage);
    Some(parts)
}

/// OpenAI's `prompt_tokens` includes cache reads; ours does not.
pub fn normalise_usage(u: &Value) -> Usage {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let prompt = n(u.get("prompt_tokens"));
    let cached = n(u.pointer("/prompt_tokens_details/cached_tokens"));
    Usage {
        input_tokens: prompt.saturating_sub(cached),
        output_tokens: n(u.get("completion_tokens")),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    }
}

/// A model listing (`GET /models`) with each model's window where the server says it.
pub fn parse_models(body: &Value) -> Vec<ModelInfo> {
    let Some(data) = body.get("data").and_then(Value::as_array) else {
        return vec![];
    };
    data.iter()
        .filter_map(|m| {
            let id = m.get("id").and_then(Value::as_str)?.to_owned();
            let (window, source) = window_of(m).map_or((None, None), |(w, s)| (Some(w), Some(s)));
            Some(ModelInfo {
                id,
                window,
                window_source: source,
            })
        })
        .collect()
}

/// The first field that gives a model's window, by server (SPEC §5). llama.cpp's
/// `meta.n_ctx` is the per-slot window; `n_ctx_train` is not what it serves.
fn window_of(m: &Value) -> Option<(u64, &'static str)> {
    const SOURCES: [(&str, &str); 5] = [
        ("/meta/n_ctx", "llama.cpp meta.n_ctx"),
        ("/max_model_len", "vLLM max_model_len"),
        ("/context_length", "context_length"),
        ("/loaded_context_length", "LM Studio loaded_context_length"),
        ("/max_context_length", "LM Studio max_context_length"),
    ];
    SOURCES.iter().find_map(|(ptr, name)| {
        m.pointer(ptr)
            .and_then(Value::as_u64)
            .filter(|w| *w > 0)
            .map(|w| (w, *name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ChatRole as Role;
    use crate::provider::ToolCall;
    use proptest::prelude::*;

    #[test]
    fn streaming_request_asks_for_usage_and_sends_limits_only_when_set() {
        let mut req = ChatRequest {
            model: "m".into(),
            system: "sys".into(),
            messages: vec![(Role::User, "hi".into())],
            max_tokens: None,
            temperature: None,
            tools: vec![],
            tool_choice_none: false,
            steps: vec![],
        };
        let b = request_body(&req, true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["messages"][0]["role"], "system");
        assert_eq!(b["messages"][1], json!({"role": "user", "content": "hi"}));
        assert!(b.get("max_tokens").is_none() && b.get("temperature").is_none());
        req.max_tokens = Some(100);
        req.temperature = Some(0.0);
        req.system.clear();
        let b = request_body(&req, false);
        assert_eq!(
            (b["max_tokens"].clone(), b["temperature"].clone()),
            (json!(100), json!(0.0))
        );
        assert!(b.get("stream_options").is_none());
        assert_eq!(b["messages"][0]["role"], "user", "no empty system message");
    }

    #[test]
    fn shaped_bodies_are_pure_and_byte_stable() {
        let req = ChatRequest {
            model: "m".into(),
            system: "sys".into(),
            messages: vec![(Role::User, "hi".into())],
            max_tokens: Some(24),
            temperature: Some(0.0),
            tools: vec![],
            tool_choice_none: false,
            steps: vec![],
        };
        assert_eq!(
            shaped_body(&req, false, &Shape::default()),
            request_body(&req, false),
            "no shape, no new fields"
        );
        let shape = Shape {
            stop: vec!["\n".into()],
            schema: Some(crate::provider::Schema {
                name: "memory",
                schema: json!({"type": "object", "properties": {"a": {"type": "string"}}}),
            }),
        };
        let text = shaped_body(&req, false, &shape).to_string();
        assert_eq!(
            text,
            r#"{"max_tokens":24,"messages":[{"content":"sys","role":"system"},{"content":"hi","role":"user"}],"model":"m","response_format":{"json_schema":{"name":"memory","schema":{"properties":{"a":{"type":"string"}},"type":"object"}},"type":"json_schema"},"stop":["\n"],"stream":false,"temperature":0.0}"#
        );
        assert_eq!(shaped_body(&req, false, &shape).to_string(), text, "stable");
    }

    #[test]
    fn refusals_of_structured_output_are_told_from_other_errors() {
        assert!(refuses_structured_output(
            400,
            r#"{"error":{"message":"Unrecognized request argument supplied: response_format"}}"#
        ));
        assert!(refuses_structured_output(
            422,
            "json_schema is not supported"
        ));
        assert!(refuses_structured_output(400, "failed to parse grammar"));
        assert!(!refuses_structured_output(400, "context length exceeded"));
        assert!(!refuses_structured_output(
            500,
            "response_format crashed us"
        ));
    }

    #[test]
    fn chunks_give_text_reasoning_finish_and_usage() {
        let p = parse_chunk(r#"{"choices":[{"delta":{"content":"Hi"},"finish_reason":null}]}"#)
            .unwrap();
        assert_eq!(p.content.as_deref(), Some("Hi"));
        let p = parse_chunk(r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#).unwrap();
        assert_eq!(p.reasoning.as_deref(), Some("hmm"));
        let p = parse_chunk(r#"{"choices":[{"delta":{"reasoning":"hmm2"}}]}"#).unwrap();
        assert_eq!(p.reasoning.as_deref(), Some("hmm2"));
        let p = parse_chunk(r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#).unwrap();
        assert_eq!(p.finish_reason.as_deref(), Some("length"));
        let p = parse_chunk(
            r#"{"choices":[],"usage":{"prompt_tokens":728,"completion_tokens":9,
                "prompt_tokens_details":{"cached_tokens":720}}}"#,
        )
        .unwrap();
        assert_eq!(
            p.usage,
            Some(Usage {
                input_tokens: 8,
                output_tokens: 9,
                cache_read_tokens: 720,
                cache_write_tokens: 0
            })
        );
        let p = parse_chunk(r#"{"error":{"message":"boom"}}"#).unwrap();
        assert_eq!(p.error.as_deref(), Some("boom"));
        assert_eq!(parse_chunk("garbage"), None);
        assert_eq!(parse_chunk("[1,2]"), None);
        let whole =
            parse_chunk(r#"{"choices":[{"message":{"content":"full"},"finish_reason":"stop"}]}"#)
                .unwrap();
        assert_eq!(whole.content.as_deref(), Some("full"));
    }

    fn tool(name: &str) -> ToolDef {
        ToolDef {
            name: name.into(),
            description: format!("does {name}"),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }
    }

    fn tc(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn tools_steps_and_tool_choice_are_rendered_as_openai_function_calling() {
        let mut req = ChatRequest {
            model: "m".into(),
            system: String::new(),
            messages: vec![(Role::User, "hi".into())],
            max_tokens: None,
            temperature: None,
            tools: vec![],
            tool_choice_none: true,
            steps: vec![],
        };
        let b = request_body(&req, true);
        assert!(b.get("tools").is_none() && b.get("tool_choice").is_none());
        req.tools = vec![tool("b"), tool("a")];
        req.tool_choice_none = false;
        req.steps = vec![
            Step {
                text: None,
                calls: vec![tc("c1", "b", r#"{"path":"x"}"#), tc("c2", "a", "not json")],
                results: vec![("c1".into(), "ok".into()), ("c2".into(), "[error]".into())],
            },
            Step {
                text: Some("Let me look.".into()),
                calls: vec![tc("c3", "a", "{}")],
                results: vec![("c3".into(), "done".into())],
            },
        ];
        let b = request_body(&req, true);
        assert!(b.get("tool_choice").is_none());
        assert_eq!(
            b["tools"],
            json!([
                {"type": "function", "function": {"name": "b", "description": "does b",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "a", "description": "does a",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
            ]),
            "in the caller's order"
        );
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "b", "arguments": "{\"path\":\"x\"}"}},
                    {"id": "c2", "type": "function", "function": {"name": "a", "arguments": "not json"}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "tool", "tool_call_id": "c2", "content": "[error]"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "c3", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "c3", "content": "done"},
            ])
        );
        req.tool_choice_none = true;
        let mut b = request_body(&req, true);
        assert_eq!(b["tool_choice"], "none");
        without_tools(&mut b);
        assert!(b.get("tools").is_none() && b.get("tool_choice").is_none());
        assert_eq!(
            b["messages"].as_array().map(Vec::len),
            Some(6),
            "steps kept"
        );
    }

    #[test]
    fn refusals_of_tools_are_told_from_other_errors() {
        // llama.cpp without --jinja (old and newer wording), Ollama, vLLM.
        assert!(refuses_tools(
            500,
            r#"{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}"#
        ));
        assert!(refuses_tools(
            500,
            r#"{"code":500,"message":"Unsupported param: tools","type":"server_error"}"#
        ));
        assert!(refuses_tools(
            400,
            r#"{"error":{"message":"registry.ollama.ai/library/gemma:2b does not support tools"}}"#
        ));
        assert!(refuses_tools(
            400,
            r#"{"object":"error","message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"}"#
        ));
        assert!(refuses_tools(422, "functions are not supported"));
        assert!(!refuses_tools(400, "context length exceeded"));
        assert!(!refuses_tools(500, "the tool template crashed"));
        assert!(!refuses_tools(503, "tools param requires --jinja flag"));
    }

    #[test]
    fn chunks_give_tool_call_pieces() {
        let p = parse_chunk(
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c","type":"function","function":{"name":"f","arguments":"{"}}]}}]}"#,
        )
        .unwrap();
        assert_eq!(
            p.tool_calls,
            vec![ToolCallPiece {
                index: Some(1),
                id: Some("c".into()),
                name: Some("f".into()),
                arguments: Some("{".into()),
            }]
        );
        let whole = parse_chunk(
            r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
        )
        .unwrap();
        assert_eq!(
            whole.tool_calls[0].index,
            Some(0),
            "a whole call takes its position"
        );
        assert_eq!(whole.content, None);
    }

    fn arb_step() -> impl Strategy<Value = Step> {
        (
            prop::option::of("\\PC{0,30}"),
            prop::collection::vec(
                (
                    "[a-z0-9_]{1,10}",
                    "[a-z_]{1,10}",
                    "\\PC{0,30}",
                    "\\PC{0,40}",
                ),
                1..4,
            ),
        )
            .prop_map(|(text, calls)| Step {
                text,
                calls: calls.iter().map(|(id, n, a, _)| tc(id, n, a)).collect(),
                results: calls.into_iter().map(|(id, _, _, r)| (id, r)).collect(),
            })
    }

    proptest! {
        /// I3 within an attempt: step k+1's request extends step k's: its messages begin
        /// with step k's, each serialised the same, and its tools are the same bytes.
        #[test]
        fn each_steps_request_extends_the_previous_one(
            steps in prop::collection::vec(arb_step(), 1..6),
            history in prop::collection::vec("\\PC{0,40}", 1..4),
            names in prop::collection::btree_set("[a-z_]{1,12}", 0..4),
            last_none in any::<bool>(),
        ) {
            let base = ChatRequest {
                model: "m".into(),
                system: "sys".into(),
                messages: history.into_iter().map(|h| (Role::User, h)).collect(),
                max_tokens: Some(64),
                temperature: None,
                tools: names.iter().map(|n| tool(n)).collect(),
                tool_choice_none: false,
                steps: vec![],
            };
            let bodies: Vec<Value> = (0..=steps.len())
                .map(|k| {
                    let mut req = base.clone();
                    req.steps = steps[..k].to_vec();
                    req.tool_choice_none = last_none && k == steps.len();
                    request_body(&req, true)
                })
                .collect();
            for pair in bodies.windows(2) {
                let (a, b) = (&pair[0], &pair[1]);
                let (ma, mb) = (a["messages"].as_array().unwrap(), b["messages"].as_array().unwrap());
                prop_assert!(mb.len() > ma.len());
                for (x, y) in ma.iter().zip(mb) {
                    prop_assert_eq!(x, y);
                    prop_assert_eq!(x.to_string(), y.to_string());
                }
                prop_assert_eq!(a.get("tools"), b.get("tools"));
                prop_assert_eq!(a.get("tools").map(Value::to_string), b.get("tools").map(Value::to_string));
            }
        }
    }

    #[test]
    fn windows_come_from_each_servers_field() {
        let body = json!({"data": [
            {"id": "llama", "meta": {"n_ctx": 4096, "n_ctx_train": 32768}},
            {"id": "vllm", "max_model_len": 8192},
            {"id": "router", "context_length": 128000},
            {"id": "studio", "loaded_context_length": 2048, "max_context_length": 32768},
            {"id": "studio-unloaded", "max_context_length": 32768},
            {"id": "ollama"},
            {"no_id": true}
        ]});
        let models = parse_models(&body);
        let got: Vec<(&str, Option<u64>)> =
            models.iter().map(|m| (m.id.as_str(), m.window)).collect();
        assert_eq!(
            got,
            vec![
                ("llama", Some(4096)),
                ("vllm", Some(8192)),
                ("router", Some(128000)),
                ("studio", Some(2048)),
                ("studio-unloaded", Some(32768)),
                ("ollama", None)
            ]
        );
        assert_eq!(parse_models(&json!({"object": "list"})), vec![]);
    }
}
