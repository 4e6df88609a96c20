//! JSON-RPC 2.0 as MCP uses it, pure: the messages brain sends and the parse of what a
//! server sends back. Ids brain sends are integers; a server's own requests may use any id,
//! which is echoed back untouched.

use serde_json::{Map, Value, json};

/// A request's text (one line, no newline).
pub fn request(id: u64, method: &str, params: Option<Value>) -> String {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), json!("2.0"));
    m.insert("id".into(), json!(id));
    m.insert("method".into(), json!(method));
    if let Some(p) = params {
        m.insert("params".into(), p);
    }
    Value::Object(m).to_string()
}

/// A notification's text.
pub fn notification(method: &str, params: Option<Value>) -> String {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), json!("2.0"));
    m.insert("method".into(), json!(method));
    if let Some(p) = params {
        m.insert("params".into(), p);
    }
    Value::Object(m).to_string()
}

/// The answer to a server's request: `result`, or an error with `code` and `message`.
pub fn response(id: &Value, answer: Result<Value, (i64, &str)>) -> String {
    match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    }
    .to_string()
}

/// JSON-RPC's "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;

/// One message from a server.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// The answer to brain's request `id`: its `result`, or the error's message.
    Response {
        id: u64,
        result: Result<Value, RpcError>,
    },
    /// The server asks brain something (`ping`, `roots/list`, …).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
}

/// An error a server answered with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} (JSON-RPC error {code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

/// Why a message could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a JSON-RPC 2.0 message")]
    NotJsonRpc,
}

/// Parses one message, or a batch (an array) into several.
pub fn parse(text: &str) -> Result<Vec<Incoming>, ParseError> {
    let value: Value =
        serde_json::from_str(text.trim()).map_err(|e| ParseError::NotJson(e.to_string()))?;
    match value {
        Value::Array(items) => items.into_iter().map(one).collect(),
        v => Ok(vec![one(v)?]),
    }
}

fn one(v: Value) -> Result<Incoming, ParseError> {
    let Value::Object(mut m) = v else {
        return Err(ParseError::NotJsonRpc);
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(ParseError::NotJsonRpc);
    }
    let method = m.get("method").and_then(Value::as_str).map(str::to_owned);
    let params = m.remove("params").unwrap_or(Value::Null);
    match (m.remove("id"), method) {
        (Some(id), Some(method)) if !id.is_null() => Ok(Incoming::Request { id, method, params }),
        (None, Some(method)) => Ok(Incoming::Notification { method, params }),
        (Some(id), None) => {
            // Only brain's integer ids can be answered; anything else is not ours.
            let id = id.as_u64().ok_or(ParseError::NotJsonRpc)?;
            let result = if let Some(e) = m.remove("error") {
                Err(RpcError {
                    code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: e
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("an error without a message")
                        .to_owned(),
                })
            } else {
                Ok(m.remove("result").ok_or(ParseError::NotJsonRpc)?)
            };
            Ok(Incoming::Response { id, result })
        }
        _ => Err(ParseError::NotJsonRpc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_notifications_are_one_line_of_json_rpc() {
        let r = request(7, "tools/list", Some(json!({"cursor": "a\nb"})));
        assert!(!r.contains('\n'));
        assert_eq!(
            serde_json::from_str::<Value>(&r).unwrap(),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"cursor": "a\nb"}})
        );
        let n = notification("notifications/initialized", None);
        assert_eq!(
            serde_json::from_str::<Value>(&n).unwrap(),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        );
    }

    #[test]
    fn responses_requests_notifications_and_batches_parse() {
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[]}}"#).unwrap(),
            [Incoming::Response {
                id: 3,
                result: Ok(json!({"tools": []}))
            }]
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"bad"}}"#).unwrap(),
            [Incoming::Response {
                id: 4,
                result: Err(RpcError {
                    code: -32602,
                    message: "bad".into()
                })
            }]
        );
        assert_eq!(
            parse(r#"[{"jsonrpc":"2.0","id":"x","method":"ping"},{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}]"#).unwrap(),
            [
                Incoming::Request {
                    id: json!("x"),
                    method: "ping".into(),
                    params: Value::Null
                },
                Incoming::Notification {
                    method: "notifications/tools/list_changed".into(),
                    params: Value::Null
                }
            ]
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            "",
            "hello",
            "{}",
            "[1]",
            r#"{"jsonrpc":"1.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":"s","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0"}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
