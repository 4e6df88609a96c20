//! What an attempt's tool calls leave in its turn memory (SPEC §13, "After the turn"),
//! computed from its `tool_execution` events alone, so it is the same with or without a
//! mini model: `files_changed` (the path-like arguments of successful calls to tools that
//! are not read-only) and `failures` (every call that ended `error`, `denied` or
//! `timeout`). Also the calls as the mini model reads them. Pure.

use serde_json::Value;

use crate::session::events::{MemoryFailure, ToolExecution, status};

/// The argument names that name files.
pub const PATH_KEYS: [&str; 6] = ["path", "paths", "file", "filename", "source", "destination"];
/// A failure's `what` and `why` are each at most this many characters.
pub const FAILURE_MAX_CHARS: usize = 200;
/// The arguments shown in a failure's `what` (`name(args)`) are cut at this many characters.
pub const SHORT_ARGS_MAX_CHARS: usize = 80;
/// A turn memory names at most this many files…
pub const MAX_FILES_CHANGED: usize = 50;
/// …and at most this many failures (the first ones): every later turn's context carries them.
pub const MAX_FAILURES: usize = 20;
/// A call's preview in the mini model's input is cut at this many characters…
pub const CALL_PREVIEW_CHARS: usize = 300;
/// …and the whole list of calls at this many.
pub const CALLS_EXCERPT_CHARS: usize = 3000;

/// The deterministic part of a turn memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Residue {
    pub files_changed: Vec<String>,
    pub failures: Vec<MemoryFailure>,
}

/// The residue of one attempt's calls, in call order. `read_only` says whether a tool (by
/// its offered name) only reads; a tool nobody knows any more should answer `false`.
pub fn residue(calls: &[ToolExecution], read_only: &dyn Fn(&str) -> bool) -> Residue {
    let mut out = Residue::default();
    for call in calls {
        match call.status.as_str() {
            status::OK if !read_only(&call.name) => {
                for path in paths(&call.args) {
                    if out.files_changed.len() < MAX_FILES_CHANGED
                        && !out.files_changed.contains(&path)
                    {
                        out.files_changed.push(path);
                    }
                }
            }
            status::ERROR | status::DENIED | status::TIMEOUT
                if out.failures.len() < MAX_FAILURES =>
            {
                out.failures.push(MemoryFailure {
                    what: cut(
                        &format!("{}({})", call.name, short_args(&call.args)),
                        FAILURE_MAX_CHARS,
                    ),
                    why: cut(why(call).trim(), FAILURE_MAX_CHARS),
                });
            }
            _ => {}
        }
    }
    out
}

/// The path-like arguments of a call: string values of [`PATH_KEYS`], or the strings in an
/// array under one. Arguments that are not a JSON object name nothing.
fn paths(args: &str) -> Vec<String> {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(args) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for key in PATH_KEYS {
        match map.get(key) {
            Some(Value::String(s)) => out.push(s.clone()),
            Some(Value::Array(items)) => {
                out.extend(items.iter().filter_map(Value::as_str).map(str::to_owned))
            }
            _ => {}
        }
    }
    out.retain(|p| !p.trim().is_empty());
    out
}

/// The arguments on one line: compact JSON when they parse, else the text as sent.
fn short_args(args: &str) -> String {
    let one_line = match serde_json::from_str::<Value>(args) {
        Ok(v) => v.to_string(),
        Err(_) => args.split_whitespace().collect::<Vec<_>>().join(" "),
    };
    cut(&one_line, SHORT_ARGS_MAX_CHARS)
}

fn why(call: &ToolExecution) -> &str {
    match call.error.as_deref() {
        Some(e) if !e.trim().is_empty() => e,
        _ => call.status.as_str(),
    }
}

/// At most `max` characters, the last one `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The calls as the mini model reads them: one line each, `name(args) → status: preview`,
/// the whole bounded by [`CALLS_EXCERPT_CHARS`]. Empty when there were none.
pub fn calls_excerpt(calls: &[ToolExecution]) -> String {
    let mut out = String::new();
    for call in calls {
        let shown = match call.status.as_str() {
            status::OK => call.result_digest.preview.as_str(),
            _ => why(call),
        };
        let shown = shown.split_whitespace().collect::<Vec<_>>().join(" ");
        let line = format!(
            "- {}({}) → {}: {}\n",
            call.name,
            short_args(&call.args),
            call.status,
            cut(&shown, CALL_PREVIEW_CHARS)
        );
        if out.chars().count() + line.chars().count() > CALLS_EXCERPT_CHARS {
            out.push_str("- …\n");
            break;
        }
        out.push_str(&line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn call(name: &str, args: &str, status: &str, error: Option<&str>) -> ToolExecution {
        ToolExecution {
            turn: 2,
            attempt: 1,
            step: 1,
            call_id: format!("c_{name}"),
            name: name.into(),
            server: "fs".into(),
            args: args.into(),
            status: status.into(),
            result_digest: Default::default(),
            error: error.map(str::to_owned),
            duration_ms: 3,
        }
    }

    fn writes(name: &str) -> bool {
        !name.starts_with("fs__read")
    }

    #[test]
    fn successful_writes_name_their_paths_once_in_order() {
        let calls = [
            call(
                "fs__write_file",
                r#"{"path":"/t/a.txt","content":"x"}"#,
                "ok",
                None,
            ),
            call(
                "fs__move_file",
                r#"{"source":"/t/a.txt","destination":"/t/b.txt"}"#,
                "ok",
                None,
            ),
            call("fs__read_file", r#"{"path":"/t/r.txt"}"#, "ok", None),
            call(
                "fs__write_file",
                r#"{"path":"/t/z.txt"}"#,
                "error",
                Some("disk full"),
            ),
            call(
                "fs__edit",
                r#"{"paths":["/t/c", 7, null, "/t/d", ""],"file":{"x":1}}"#,
                "ok",
                None,
            ),
            call(
                "fs__edit",
                r#"{"filename": 12, "path": ["/t/e"]}"#,
                "ok",
                None,
            ),
        ];
        let r = residue(&calls, &|n| !writes(n));
        assert_eq!(
            r.files_changed,
            ["/t/a.txt", "/t/b.txt", "/t/c", "/t/d", "/t/e"],
            "read-only calls, failed calls and non-string values name nothing"
        );
    }

    #[test]
    fn failures_are_every_error_denial_and_timeout() {
        let calls = [
            call(
                "fs__write_file",
                "{not json",
                "error",
                Some("the arguments are not valid JSON: key must be a string"),
            ),
            call(
                "nope",
                "{}",
                "error",
                Some("there is no tool named \"nope\""),
            ),
            call(
                "fs__write_file",
                r#"{"path": "/t/x"}"#,
                "denied",
                Some("[denied by the user]"),
            ),
            call(
                "slow__wait",
                "{}",
                "timeout",
                Some("[the tool did not answer in 2 s]"),
            ),
            call("slow__wait", "{}", "cancelled", Some("[cancelled]")),
            call("fs__write_file", r#"{"path": "/t/ok"}"#, "ok", None),
            call("x", "{}", "error", None),
        ];
        let r = residue(&calls, &|_| false);
        let got: Vec<(&str, &str)> = r
            .failures
            .iter()
            .map(|f| (f.what.as_str(), f.why.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "fs__write_file({not json)",
                    "the arguments are not valid JSON: key must be a string"
                ),
                ("nope({})", "there is no tool named \"nope\""),
                (
                    "fs__write_file({\"path\":\"/t/x\"})",
                    "[denied by the user]"
                ),
                ("slow__wait({})", "[the tool did not answer in 2 s]"),
                ("x({})", "error"),
            ]
        );
        assert_eq!(r.files_changed, ["/t/ok"]);
    }

    #[test]
    fn long_arguments_and_errors_are_cut() {
        let args = format!(r#"{{"path": "{}"}}"#, "p".repeat(500));
        let why = "é".repeat(1000);
        let r = residue(&[call("t", &args, "error", Some(&why))], &|_| false);
        let f = &r.failures[0];
        assert!(
            f.what.ends_with("…)") || f.what.ends_with('…'),
            "{}",
            f.what
        );
        assert!(f.what.starts_with("t({\"path\":\"ppp"));
        assert_eq!(f.why.chars().count(), FAILURE_MAX_CHARS);
        assert!(f.why.ends_with('…'));
    }

    #[test]
    fn the_mini_models_excerpt_is_one_line_per_call_and_bounded() {
        let mut ok = call("fs__read_file", r#"{"path": "/t/a"}"#, "ok", None);
        ok.result_digest.preview = "line one\nline two".into();
        let failed = call(
            "x",
            "{}",
            "timeout",
            Some("[the tool did not answer in 2 s]"),
        );
        assert_eq!(
            calls_excerpt(&[ok.clone(), failed]),
            "- fs__read_file({\"path\":\"/t/a\"}) → ok: line one line two\n\
             - x({}) → timeout: [the tool did not answer in 2 s]\n"
        );
        ok.result_digest.preview = "y".repeat(4000);
        let many = vec![ok; 100];
        let text = calls_excerpt(&many);
        assert!(
            text.chars().count() <= CALLS_EXCERPT_CHARS + 4,
            "{}",
            text.len()
        );
        assert!(text.ends_with("- …\n"));
        assert_eq!(calls_excerpt(&[]), "");
    }

    proptest! {
        /// Whatever the calls, the residue is bounded, has no duplicate file, and only
        /// names paths of successful calls.
        #[test]
        fn the_residue_is_bounded_and_deterministic(
            raw in proptest::collection::vec(
                (prop_oneof!["ok", "error", "denied", "timeout", "cancelled"],
                 ".{0,300}",
                 proptest::option::of(".{0,400}")),
                0..80),
        ) {
            let calls: Vec<ToolExecution> = raw
                .iter()
                .enumerate()
                .map(|(i, (s, path, e))| {
                    let args = if i % 3 == 0 { path.clone() } else { serde_json::json!({"path": path, "paths": [path, i]}).to_string() };
                    call(&format!("t{}", i % 4), &args, s, e.as_deref())
                })
                .collect();
            let ro = |n: &str| n == "t0";
            let r = residue(&calls, &ro);
            prop_assert_eq!(&r, &residue(&calls, &ro));
            prop_assert!(r.files_changed.len() <= MAX_FILES_CHANGED);
            prop_assert!(r.failures.len() <= MAX_FAILURES);
            let mut seen = std::collections::HashSet::new();
            for f in &r.files_changed {
                prop_assert!(seen.insert(f));
            }
            for f in &r.failures {
                prop_assert!(f.what.chars().count() <= FAILURE_MAX_CHARS);
                prop_assert!(f.why.chars().count() <= FAILURE_MAX_CHARS);
            }
        }
    }
}
