//! The OpenAI-compatible wire format, as pure functions: request bodies, stream chunks,
//! usage normalisation, and model listings with their context windows.

use serde_json::{Value, json};

use crate::session::events::Usage;

use super::{ChatRequest, ModelInfo, Shape};

/// The request body of a chat completion.
pub fn request_body(req: &ChatRequest, stream: bool) -> Value {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    for (role, content) in &req.messages {
        messages.push(json!({"role": role, "content": content}));
    }
    let mut body = json!({"model": req.model, "messages": messages, "stream": stream});
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
        let delta = choice.get("delta").or_else(|| choice.get("message"));
        if let Some(d) = delta {
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

    #[test]
    fn streaming_request_asks_for_usage_and_sends_limits_only_when_set() {
        let mut req = ChatRequest {
            model: "m".into(),
            system: "sys".into(),
            messages: vec![(Role::User, "hi".into())],
            max_tokens: None,
            temperature: None,
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
