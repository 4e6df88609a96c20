//! The web UI's files, embedded in the binary (no Node at build or run time). The markdown
//! renderer (marked 18.2.1) and sanitiser (DOMPurify 3.5.0) are vendored, pinned copies of
//! the npm packages; their licences sit beside them in `assets/vendor`.

/// The page's Content-Security-Policy: scripts only from this server, none inline; no
/// frames, plugins or foreign connections.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
style-src 'self'; connect-src 'self'; img-src 'self' data:; font-src 'self'; base-uri 'none'; \
form-action 'self'; frame-ancestors 'none'";

pub const INDEX_HTML: &str = include_str!("../../assets/index.html");

/// A file under `/assets/` and its content type.
pub fn find(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "app.js" => (
            include_str!("../../assets/app.js"),
            "text/javascript; charset=utf-8",
        ),
        "app.css" => (
            include_str!("../../assets/app.css"),
            "text/css; charset=utf-8",
        ),
        "vendor/marked.umd.js" => (
            include_str!("../../assets/vendor/marked.umd.js"),
            "text/javascript; charset=utf-8",
        ),
        "vendor/purify.min.js" => (
            include_str!("../../assets/vendor/purify.min.js"),
            "text/javascript; charset=utf-8",
        ),
        _ => return None,
    })
}
