//! The names tools are offered under and their policy (SPEC §13). Pure.
//!
//! An MCP tool is offered as `NAME__tool`: characters outside `[A-Za-z0-9_-]` become `_`
//! (what OpenAI's function names accept), cut at [`MAX_NAME_CHARS`]. Two tools that end up
//! with one name cannot both be offered: at startup that is refused, naming both.

use std::collections::HashMap;

use super::Policy;
use super::config::ServerConfig;

/// The longest function name providers accept.
pub const MAX_NAME_CHARS: usize = 64;

/// The separator between a server's name and its tool's.
pub const SEPARATOR: &str = "__";

/// `text` with every character outside `[A-Za-z0-9_-]` replaced by `_`, cut at
/// [`MAX_NAME_CHARS`].
pub fn sanitise(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME_CHARS)
        .collect()
}

/// The name an MCP server's tool is offered under.
pub fn offered(server: &str, tool: &str) -> String {
    sanitise(&format!("{server}{SEPARATOR}{tool}"))
}

/// A tool's policy: the server's `deny` list, then its `allow` list or a read-only tool,
/// else ask.
pub fn policy(server: &ServerConfig, tool: &str, read_only: bool) -> Policy {
    if server.deny.iter().any(|t| t == tool) {
        Policy::Deny
    } else if read_only || server.allow.iter().any(|t| t == tool) {
        Policy::Allow
    } else {
        Policy::Ask
    }
}

/// Two tools that would be offered under one name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "tools {first} and {second} would both be offered as {name:?} (names are cut to \
     [A-Za-z0-9_-] and {MAX_NAME_CHARS} characters); rename a server or deny one of them"
)]
pub struct Collision {
    pub name: String,
    /// `server/tool` of each.
    pub first: String,
    pub second: String,
}

/// `server/tool`, for messages.
pub fn label(server: &str, tool: &str) -> String {
    format!("{server}/{tool}")
}

/// The first collision among `(offered name, label)` pairs, in their order.
pub fn first_collision<'a>(
    tools: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<Collision> {
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for (name, label) in tools {
        if let Some(first) = seen.insert(name, label) {
            return Some(Collision {
                name: name.to_owned(),
                first: first.to_owned(),
                second: label.to_owned(),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::config::Transport;
    use proptest::prelude::*;

    fn server(allow: &[&str], deny: &[&str]) -> ServerConfig {
        ServerConfig {
            name: "s".into(),
            transport: Transport::Http {
                url: "http://h".into(),
                headers: Vec::new(),
            },
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
            timeout: None,
        }
    }

    #[test]
    fn names_join_server_and_tool_and_keep_only_what_providers_accept() {
        assert_eq!(offered("filesystem", "read_file"), "filesystem__read_file");
        assert_eq!(offered("my server", "get-sum"), "my_server__get-sum");
        assert_eq!(offered("dév", "ünï.cödé"), "d_v___n__c_d_");
        assert_eq!(offered("😀", "a/b:c"), "___a_b_c");
        let long = offered(&"s".repeat(40), &"t".repeat(40));
        assert_eq!(long.len(), MAX_NAME_CHARS);
        assert!(long.starts_with(&format!("{}__t", "s".repeat(40))));
    }

    #[test]
    fn collisions_name_both_tools() {
        let a = offered("a.b", "x");
        let b = offered("a_b", "x");
        let c = first_collision([
            ("search_history", "builtin/search_history"),
            (a.as_str(), "a.b/x"),
            (b.as_str(), "a_b/x"),
        ])
        .unwrap();
        assert_eq!(c.name, "a_b__x");
        let text = c.to_string();
        assert!(text.contains("a.b/x") && text.contains("a_b/x"), "{text}");
        // Cut at 64 characters, two long names meet.
        let long1 = offered("s", &format!("{}1", "t".repeat(70)));
        let long2 = offered("s", &format!("{}2", "t".repeat(70)));
        assert!(first_collision([(long1.as_str(), "1"), (long2.as_str(), "2")]).is_some());
        assert_eq!(first_collision([("a", "1"), ("b", "2")]), None);
    }

    #[test]
    fn deny_beats_allow_beats_ask() {
        let s = server(&["list"], &["rm"]);
        assert_eq!(policy(&s, "rm", true), Policy::Deny);
        assert_eq!(policy(&s, "list", false), Policy::Allow);
        assert_eq!(policy(&s, "read", true), Policy::Allow);
        assert_eq!(policy(&s, "write", false), Policy::Ask);
    }

    proptest! {
        #[test]
        fn offered_names_are_always_valid_function_names(server in "\\PC{0,50}", tool in "\\PC{0,50}") {
            let name = offered(&server, &tool);
            prop_assert!(name.chars().count() <= MAX_NAME_CHARS);
            prop_assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
            prop_assert_eq!(offered(&server, &tool), name);
        }
    }
}
