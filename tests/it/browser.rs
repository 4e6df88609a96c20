//! The web UI in a real headless Chromium: runs `tests/browser/ui.test.mjs` (node's test
//! runner with playwright-core) against this build's binary and `mock_llm`. It needs
//! Debian's Chromium and `tests/browser/node_modules` (`.ci/browser-deps` installs both);
//! without them it says so and passes, except under CI, where it must run.

use std::path::Path;
use std::process::Command;

#[test]
fn the_web_ui_in_headless_chromium() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = root.join("tests/browser/node_modules/playwright-core");
    let chromium = Path::new("/usr/bin/chromium");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !(modules.exists() && chromium.exists() && node) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install the browser test's needs (.ci/browser-deps)"
        );
        eprintln!(
            "browser test skipped: run .ci/browser-deps to install Chromium and playwright-core"
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
