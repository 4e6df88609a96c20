//! What the README, docs/ and every `--help` send a reader to exists in the repository
//! (issue 34, 11): no "SPEC §N" (the specification is not shipped), every README section
//! cited by name (`README: "Tools"`, `README ("A", "B")`) is a heading, and every link to a
//! file's section (`[x](../README.md#tools)`, `[x](#api)`) finds that file and heading.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::run_brain;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A Markdown file's headings, outside fenced code blocks.
fn headings(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(line.trim_start_matches('#').trim().to_owned());
        }
    }
    found
}

/// GitHub's anchor for a heading: lowercase, spaces as hyphens, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The README sections `text` cites by name: `README: "A"` and `README ("A", "B")`.
fn cited_sections(text: &str) -> Vec<String> {
    let mut cited = Vec::new();
    for (at, _) in text.match_indices("README") {
        let mut rest = &text[at + "README".len()..];
        rest = rest
            .strip_prefix(": ")
            .or_else(|| rest.strip_prefix(" ("))
            .unwrap_or("");
        while let Some(quoted) = rest.strip_prefix('"') {
            let Some(end) = quoted.find('"') else { break };
            cited.push(quoted[..end].to_owned());
            rest = quoted[end + 1..].trim_start_matches([',', ' ', '\n']);
        }
    }
    cited
}

/// Links to a Markdown file's section in `text`: `(path#anchor)` pairs, `path` empty for
/// the file itself.
fn section_links(text: &str) -> Vec<(String, String)> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let target = &text[at + 2..];
            let target = &target[..target.find(')')?];
            let (path, section) = target.split_once('#')?;
            let local = path.is_empty() || path.ends_with(".md");
            (local && !path.contains("://")).then(|| (path.to_owned(), section.to_owned()))
        })
        .collect()
}

/// Every way `text` (read from `file`, or help when `None`) sends its reader somewhere
/// that does not exist.
fn broken(text: &str, file: Option<&Path>) -> Vec<String> {
    let readme: BTreeSet<String> = headings(&repo().join("README.md")).into_iter().collect();
    let mut wrong = Vec::new();
    if text.contains("SPEC §") {
        wrong.push("cites \"SPEC §\"".to_owned());
    }
    for section in cited_sections(text) {
        if !readme.contains(&section) {
            wrong.push(format!("README has no section {section:?}"));
        }
    }
    let here = file.and_then(Path::parent).unwrap_or(Path::new("."));
    for (path, section) in section_links(text) {
        let target = match (path.is_empty(), file) {
            (true, Some(file)) => file.to_path_buf(),
            _ => here.join(&path),
        };
        if !target.exists() {
            wrong.push(format!("a link to {path} which is not in the repository"));
            continue;
        }
        if !headings(&target).iter().any(|h| anchor(h) == section) {
            wrong.push(format!("{} has no heading #{section}", target.display()));
        }
    }
    wrong
}

#[test]
fn the_helpers_find_what_is_broken() {
    assert_eq!(anchor("Team mode (PostgreSQL)"), "team-mode-postgresql");
    assert_eq!(anchor("Turn memory (`--distill`)"), "turn-memory---distill");
    assert_eq!(
        cited_sections("x (README: \"Tools\") and the README (\"A b\", \"C\")."),
        ["Tools", "A b", "C"]
    );
    let wrong = broken(
        "see SPEC §12, README: \"No such\", [t](#tools) and [x](README.md#nope)",
        Some(&repo().join("README.md")),
    );
    assert_eq!(wrong.len(), 3, "{wrong:?}");
    assert!(
        broken(
            "[t](#tools), README: \"Tools\"",
            Some(&repo().join("README.md"))
        )
        .is_empty()
    );
}

#[test]
fn the_readme_and_docs_cite_only_what_ships() {
    let mut files = vec![repo().join("README.md")];
    let docs = std::fs::read_dir(repo().join("docs")).unwrap();
    files.extend(
        docs.map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "md")),
    );
    assert!(files.len() > 1, "{files:?}");
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for w in broken(&text, Some(file)) {
            wrong.push(format!("{}: {w}", file.display()));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The subcommands a help lists under "Commands:", `help` aside.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_help_cites_only_what_ships() {
    let mut todo = vec![Vec::<String>::new()];
    let mut seen = 0;
    while let Some(command) = todo.pop() {
        let mut args = command.clone();
        args.push("--help".into());
        let out = run_brain(&args, b"");
        assert!(out.status.success(), "{args:?}: {out:?}");
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!help.contains("SPEC"), "{args:?}: {help}");
        let wrong = broken(&help, None);
        assert!(wrong.is_empty(), "{args:?}: {wrong:?}");
        for sub in subcommands(&help) {
            let mut next = command.clone();
            next.push(sub);
            todo.push(next);
        }
        seen += 1;
    }
    // brain, its commands and theirs: a walk that stopped at the top would prove nothing.
    assert!(seen > 10, "only {seen} helps read");
}
