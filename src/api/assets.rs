//! The web UI's files, embedded in the binary (no Node at build or run time). The markdown
//! renderer (marked 18.2.1), sanitiser (DOMPurify 3.5.0) and code highlighter (highlight.js
//! 11.11.1, the common-languages build of `@highlightjs/cdn-assets`) are vendored, pinned
//! copies of the npm packages; their licences sit beside them in `assets/vendor`.

/// The page's Content-Security-Policy: scripts only from this server, none inline; no
/// frames, plugins or foreign connections.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
style-src 'self'; connect-src 'self'; img-src 'self' data:; font-src 'self'; base-uri 'none'; \
form-action 'self'; frame-ancestors 'none'";

pub const INDEX_HTML: &str = include_str!("../../assets/index.html");

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// One row of [`FILES`]: the file's name under `assets/`, embedded.
macro_rules! asset {
    ($name:literal, $kind:expr) => {
        ($name, include_str!(concat!("../../assets/", $name)), $kind)
    };
}

/// Every file under `/assets/`: its name, content and content type. The UI's own script is
/// ES modules (`app.js` imports `js/*.js`), loaded by the browser without a build step.
const FILES: &[(&str, &str, &str)] = &[
    asset!("app.js", JS),
    asset!("app.css", CSS),
    asset!("js/api.js", JS),
    asset!("js/code.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/import.js", JS),
    asset!("js/layout.js", JS),
    asset!("js/render.js", JS),
    asset!("js/session.js", JS),
    asset!("js/sessions.js", JS),
    asset!("js/title.js", JS),
    asset!("js/tools.js", JS),
    asset!("js/transcript.js", JS),
    asset!("js/tree.js", JS),
    asset!("js/versions.js", JS),
    asset!("favicon.svg", SVG),
    asset!("vendor/highlight.min.js", JS),
    asset!("vendor/marked.umd.js", JS),
    asset!("vendor/purify.min.js", JS),
];

/// A file under `/assets/` and its content type.
pub fn find(name: &str) -> Option<(&'static str, &'static str)> {
    FILES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, body, kind)| (*body, *kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every module the page imports is served, so a missing table row is a test failure
    /// rather than a blank page.
    #[test]
    fn every_imported_module_is_served() {
        for (name, body, kind) in FILES {
            if *kind != JS {
                continue;
            }
            let dir = name.rsplit_once('/').map_or("", |(d, _)| d);
            for line in body.lines().filter(|l| l.starts_with("import ")) {
                let Some(from) = line.split(['\'', '"']).nth(1) else {
                    continue;
                };
                let rel = from.trim_start_matches("./");
                let path = if dir.is_empty() {
                    rel.to_owned()
                } else {
                    format!("{dir}/{rel}")
                };
                assert!(find(&path).is_some(), "{name} imports {from}, not served");
            }
        }
        assert!(INDEX_HTML.contains("src=\"/assets/app.js\" type=\"module\""));
    }
}
