//! The web UI in a real headless Chromium: runs `tests/browser/ui.test.mjs` (node's test
//! runner with playwright-core) against this build's binary and `mock_llm`. It needs
//! Chromium (`/usr/bin/chromium`, or where `CHROMIUM` says), node and
//! `tests/browser/node_modules` (`.ci/browser-deps` installs them); without them it passes
//! with a `SKIPPED` line in `cargo test`'s output, except under CI, where it must run.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::skipped;

#[test]
fn the_web_ui_in_headless_chromium() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = root.join("tests/browser/node_modules/playwright-core");
    // The same variable and default as ui.test.mjs.
    let chromium = std::env::var_os("CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let missing: Vec<String> = [
        (!chromium.exists()).then(|| format!("Chromium ({})", chromium.display())),
        (!node).then(|| "node".to_owned()),
        (!modules.exists()).then(|| "playwright-core (tests/browser/node_modules)".to_owned()),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !missing.is_empty() {
        skipped(
            "browser::the_web_ui_in_headless_chromium",
            &format!("missing {}", missing.join(", ")),
            "run .ci/browser-deps, or point CHROMIUM at a Chromium binary",
        );
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let target_debug = exe.parent().and_then(Path::parent).unwrap();
    let out = Command::new("node")
        .args(["--test", "tests/browser/"])
        .current_dir(root)
        .env("BRAIN_BIN", env!("CARGO_BIN_EXE_brain"))
        .env("MOCK_BIN", target_debug.join("examples").join("mock_llm"))
        .env(
            "SCREENSHOT_DIR",
            target_debug.parent().unwrap().join("screenshots"),
        )
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    let summary: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("# ") || l.starts_with("not ok"))
        .collect();
    eprintln!("{}", summary.join("\n"));
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A skip shows in a plain `cargo test` (not only with `--nocapture`), and under CI a
/// missing browser is a failure.
#[test]
fn without_chromium_the_skip_is_visible_and_ci_fails() {
    const TEST: &str = "browser::the_web_ui_in_headless_chromium";
    let missing = ("CHROMIUM", Some("/nonexistent/chromium"));
    let (ok, out) = crate::support::run_this_test(TEST, &[missing, ("CI", None)]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("SKIPPED {TEST}")) && out.contains(".ci/browser-deps"),
        "{out}"
    );
    let (ok, out) = crate::support::run_this_test(TEST, &[missing, ("CI", Some("1"))]);
    assert!(!ok, "a missing browser fails under CI: {out}");
}
