//! `--mcp-config PATH`: the `{"mcpServers": {...}}` file other MCP clients use, so a user
//! can paste theirs (SPEC §13). [`parse`] is pure: text in, servers or an error naming
//! the server and field out ([`load`] reads the file first). Keys brain does not know are
//! ignored (other clients add their own).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use super::mcp::stdio::Spawn;

/// The longest `timeout_s` a server may set.
pub const MAX_TIMEOUT_S: f64 = 86_400.0;

/// How to reach a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    Stdio(Spawn),
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// One configured server.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    /// Its tools that run without asking.
    pub allow: Vec<String>,
    /// Its tools never offered.
    pub deny: Vec<String>,
    /// Its calls' limit (`timeout_s`), else `--tool-timeout`.
    pub timeout: Option<Duration>,
}

/// A whole configuration, servers sorted by name.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct McpConfig {
    pub servers: Vec<ServerConfig>,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("cannot read the MCP configuration {}: {why}", path.display())]
    Read { path: PathBuf, why: String },
    #[error("the MCP configuration is not JSON: {0}")]
    Json(String),
    #[error("the MCP configuration: {0}")]
    Shape(String),
    #[error("the MCP configuration, server {server:?}: {why}")]
    Server { server: String, why: String },
}

/// Reads and parses the file at `path`.
pub fn load(path: &Path) -> Result<McpConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: path.to_owned(),
        why: e.to_string(),
    })?;
    parse(&text)
}

/// Parses a configuration's text.
pub fn parse(text: &str) -> Result<McpConfig, ConfigError> {
    let root: Value = serde_json::from_str(text).map_err(|e| ConfigError::Json(e.to_string()))?;
    let Some(root) = root.as_object() else {
        return Err(ConfigError::Shape("it must be a JSON object".into()));
    };
    let servers = match root.get("mcpServers") {
        Some(Value::Object(s)) => s,
        Some(_) => return Err(ConfigError::Shape("`mcpServers` must be an object".into())),
        None => {
            return Err(ConfigError::Shape(
                "no `mcpServers` object (the shape is {\"mcpServers\": {\"NAME\": {...}}})".into(),
            ));
        }
    };
    let mut out = Vec::new();
    for (name, value) in servers {
        let bad = |why: String| ConfigError::Server {
            server: name.clone(),
            why,
        };
        if name.trim().is_empty() {
            return Err(ConfigError::Shape("a server has an empty name".into()));
        }
        let Some(fields) = value.as_object() else {
            return Err(bad("must be an object".into()));
        };
        out.push(server(name, fields).map_err(bad)?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(McpConfig { servers: out })
}

fn server(name: &str, f: &Map<String, Value>) -> Result<ServerConfig, String> {
    let transport = match (f.get("command"), f.get("url")) {
        (Some(_), Some(_)) => return Err("has both `command` and `url`; give one".into()),
        (None, None) => {
            return Err("needs `command` (a stdio server) or `url` (an HTTP server)".into());
        }
        (Some(command), None) => {
            for http_only in ["headers"] {
                if f.contains_key(http_only) {
                    return Err(format!("`{http_only}` is for `url` servers"));
                }
            }
            Transport::Stdio(Spawn {
                command: non_empty(command, "command")?,
                args: strings(f.get("args"), "args")?,
                env: pairs(f.get("env"), "env")?,
                cwd: match f.get("cwd") {
                    None | Some(Value::Null) => None,
                    Some(c) => Some(PathBuf::from(non_empty(c, "cwd")?)),
                },
            })
        }
        (None, Some(url)) => {
            let url = non_empty(url, "url")?;
            let lower = url.to_ascii_lowercase();
            if !(lower.starts_with("http://") || lower.starts_with("https://")) {
                return Err(format!("`url` {url:?} is not an http:// or https:// URL"));
            }
            for stdio_only in ["args", "env", "cwd"] {
                if f.contains_key(stdio_only) {
                    return Err(format!("`{stdio_only}` is for `command` servers"));
                }
            }
            Transport::Http {
                url,
                headers: pairs(f.get("headers"), "headers")?,
            }
        }
    };
    let timeout = match f.get("timeout_s") {
        None | Some(Value::Null) => None,
        Some(t) => match t.as_f64() {
            Some(s) if s > 0.0 && s <= MAX_TIMEOUT_S => Some(Duration::from_secs_f64(s)),
            _ => {
                return Err(format!(
                    "`timeout_s` must be a number of seconds above 0 and at most {MAX_TIMEOUT_S}"
                ));
            }
        },
    };
    let allow = strings(f.get("allow"), "allow")?;
    let deny = strings(f.get("deny"), "deny")?;
    if let Some(both) = allow.iter().find(|t| deny.contains(t)) {
        return Err(format!("tool {both:?} is in both `allow` and `deny`"));
    }
    Ok(ServerConfig {
        name: name.to_owned(),
        transport,
        allow,
        deny,
        timeout,
    })
}

fn non_empty(v: &Value, field: &str) -> Result<String, String> {
    match v.as_str() {
        Some(s) if !s.trim().is_empty() => Ok(s.to_owned()),
        Some(_) => Err(format!("`{field}` is empty")),
        None => Err(format!("`{field}` must be a string")),
    }
}

/// An optional array of strings.
fn strings(v: Option<&Value>, field: &str) -> Result<Vec<String>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let bad = || format!("`{field}` must be an array of strings");
    v.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|s| s.as_str().map(str::to_owned).ok_or_else(bad))
        .collect()
}

/// An optional object of string values, in the file's key order (sorted: serde_json's map).
fn pairs(v: Option<&Value>, field: &str) -> Result<Vec<(String, String)>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let bad = || format!("`{field}` must be an object of strings");
    v.as_object()
        .ok_or_else(bad)?
        .iter()
        .map(|(k, s)| {
            s.as_str()
                .map(|s| (k.clone(), s.to_owned()))
                .ok_or_else(bad)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn a_pasted_configuration_parses_both_transports_and_the_per_server_policy() {
        let c = parse(
            r#"{"mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"],
                       "env": {"A": "1"}, "cwd": "/tmp", "deny": ["write_file"],
                       "allow": ["list_directory"], "timeout_s": 2.5, "type": "stdio"},
                "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer x"}}
            }, "somethingElse": 1}"#,
        )
        .unwrap();
        assert_eq!(c.servers.len(), 2);
        let fs = &c.servers[0];
        assert_eq!(fs.name, "fs");
        assert_eq!(
            fs.transport,
            Transport::Stdio(Spawn {
                command: "npx".into(),
                args: vec!["-y".into(), "server-filesystem".into(), "/tmp".into()],
                env: vec![("A".into(), "1".into())],
                cwd: Some(PathBuf::from("/tmp")),
            })
        );
        assert_eq!(fs.deny, ["write_file"]);
        assert_eq!(fs.allow, ["list_directory"]);
        assert_eq!(fs.timeout, Some(Duration::from_millis(2500)));
        let web = &c.servers[1];
        assert_eq!(
            web.transport,
            Transport::Http {
                url: "http://127.0.0.1:9/mcp".into(),
                headers: vec![("Authorization".into(), "Bearer x".into())],
            }
        );
        assert_eq!(web.timeout, None);
        assert!(parse(r#"{"mcpServers": {}}"#).unwrap().servers.is_empty());
    }

    #[test]
    fn every_mistake_names_the_server_and_the_field() {
        assert!(error("not json").contains("not JSON"));
        assert!(error("[]").contains("JSON object"));
        assert!(error("{}").contains("mcpServers"));
        assert!(error(r#"{"mcpServers": []}"#).contains("`mcpServers` must be an object"));
        let cases = [
            (r#"{"a": 1}"#, "must be an object"),
            (r#"{"a": {}}"#, "needs `command`"),
            (
                r#"{"a": {"command": "x", "url": "http://h"}}"#,
                "both `command` and `url`",
            ),
            (r#"{"a": {"command": 3}}"#, "`command` must be a string"),
            (r#"{"a": {"command": " "}}"#, "`command` is empty"),
            (
                r#"{"a": {"command": "x", "args": "y"}}"#,
                "`args` must be an array",
            ),
            (
                r#"{"a": {"command": "x", "args": [1]}}"#,
                "`args` must be an array",
            ),
            (
                r#"{"a": {"command": "x", "env": {"K": 1}}}"#,
                "`env` must be an object",
            ),
            (
                r#"{"a": {"command": "x", "cwd": 1}}"#,
                "`cwd` must be a string",
            ),
            (
                r#"{"a": {"command": "x", "headers": {}}}"#,
                "`headers` is for `url`",
            ),
            (r#"{"a": {"url": "ftp://h"}}"#, "not an http"),
            (
                r#"{"a": {"url": "http://h", "args": []}}"#,
                "`args` is for `command`",
            ),
            (
                r#"{"a": {"url": "http://h", "headers": []}}"#,
                "`headers` must be an object",
            ),
            (r#"{"a": {"command": "x", "timeout_s": 0}}"#, "`timeout_s`"),
            (
                r#"{"a": {"command": "x", "timeout_s": "5"}}"#,
                "`timeout_s`",
            ),
            (
                r#"{"a": {"command": "x", "allow": "t"}}"#,
                "`allow` must be an array",
            ),
            (
                r#"{"a": {"command": "x", "deny": [null]}}"#,
                "`deny` must be an array",
            ),
            (
                r#"{"a": {"command": "x", "allow": ["t"], "deny": ["t"]}}"#,
                "both `allow` and `deny`",
            ),
        ];
        for (servers, want) in cases {
            let e = error(&format!(r#"{{"mcpServers": {servers}}}"#));
            assert!(
                e.contains("server \"a\"") && e.contains(want),
                "{servers}: {e}"
            );
        }
        assert!(error(r#"{"mcpServers": {"": {"command": "x"}}}"#).contains("empty name"));
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = load(Path::new("/nonexistent/mcp.json")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/mcp.json"), "{e}");
    }
}
