//! Who may talk to the server (SPEC §12): the `Host` check against DNS rebinding (when no
//! token is set), the `Origin` check against cross-site requests, and bearer tokens
//! compared in constant time.
//!
//! The token check reads the same resolved path the router does (see
//! [`super::request::parse_target`]) and is default-deny: every route needs the token
//! except the few that are [`public`] (`/health` and the web UI's files), however the
//! path was spelled.

use std::net::SocketAddr;

use super::error::ApiError;

/// The checks every request passes before routing.
#[derive(Clone, Debug)]
pub struct Guards {
    token: Option<String>,
    /// Accepted `Host` values, lowercase, with their port.
    hosts: Vec<String>,
}

/// Whether a request changes state (and so must not come from a foreign page).
pub fn state_changing(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD" | "OPTIONS")
}

impl Guards {
    /// An `--allowed-host` without a port is accepted with the listening port (SPEC §12:
    /// a Host always carries the port of a non-default listener). One given with a port is
    /// accepted with exactly that port; with port 80 or 443 also without it, because
    /// clients leave a default port out of `Host` (a reverse proxy in front of brain).
    pub fn new(listen: SocketAddr, token: Option<String>, allowed_hosts: &[String]) -> Guards {
        let port = listen.port();
        let mut hosts = vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
            listen.to_string(),
        ];
        for h in allowed_hosts {
            let h = h.trim().to_ascii_lowercase();
            if h.is_empty() {
                continue;
            }
            match explicit_port(&h) {
                Some((name, p)) => {
                    if p == "80" || p == "443" {
                        hosts.push(name.to_owned());
                    }
                    hosts.push(h);
                }
                None => hosts.push(format!("{h}:{port}")),
            }
        }
        Guards { token, hosts }
    }

    fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// Checks one request: its `Host` (without a token), its `Origin` (state-changing
    /// requests), its bearer token (every route but the [`public`] ones, with a token).
    pub fn check(
        &self,
        method: &str,
        segments: &[String],
        host: Option<&str>,
        origin: Option<&str>,
        authorization: Option<&str>,
    ) -> Result<(), ApiError> {
        if self.token.is_none() && !host.is_some_and(|h| self.host_allowed(h)) {
            return Err(ApiError::new(
                403,
                "forbidden_host",
                "this Host is not served here",
            ));
        }
        if let Some(origin) = origin.filter(|_| state_changing(method)) {
            let same_site = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|o| {
                    self.host_allowed(o) || host.is_some_and(|h| h.eq_ignore_ascii_case(o))
                });
            if !same_site {
                return Err(ApiError::new(
                    403,
                    "forbidden_origin",
                    "cross-origin requests are refused",
                ));
            }
        }
        if let (Some(token), false) = (&self.token, public(segments)) {
            let given = authorization.and_then(bearer).unwrap_or("");
            if !constant_time_eq(given.as_bytes(), token.as_bytes()) {
                return Err(ApiError::new(
                    401,
                    "unauthorized",
                    "a valid bearer token is required",
                ));
            }
        }
        Ok(())
    }
}

/// Routes anyone may fetch, token or not: the health check and the web UI's files (the
/// page asks for the token itself). Everything else, unknown paths included, needs it.
pub fn public(segments: &[String]) -> bool {
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    matches!(
        s.as_slice(),
        [] | ["health"] | ["favicon.ico"] | ["sessions", _] | ["assets", ..]
    )
}

/// The credentials of a `Bearer` authorization; the scheme is case-insensitive (RFC 7235).
fn bearer(authorization: &str) -> Option<&str> {
    let (scheme, credentials) = authorization.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

/// `host:port` split at its port, when it has one (`[::1]:80` included).
fn explicit_port(h: &str) -> Option<(&str, &str)> {
    let (name, port) = h.rsplit_once(':')?;
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    // A bare IPv6 address has colons of its own; only a bracketed one has a port.
    let whole_name = if name.starts_with('[') {
        name.ends_with(']')
    } else {
        !name.contains(':')
    };
    (digits && whole_name).then_some((name, port))
}

/// Compares two secrets in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(path: &str) -> Vec<String> {
        crate::api::request::parse_target(path).unwrap().segments
    }

    fn guards(token: Option<&str>) -> Guards {
        Guards::new(
            "127.0.0.1:7420".parse().unwrap(),
            token.map(str::to_owned),
            &[
                "brain.lan".into(),
                "proxy.example:443".into(),
                "[fd00::1]:8080".into(),
            ],
        )
    }

    #[test]
    fn hosts_are_checked_without_a_token() {
        let g = guards(None);
        for ok in [
            "127.0.0.1:7420",
            "localhost:7420",
            "LOCALHOST:7420",
            "[::1]:7420",
            "brain.lan:7420",
            "proxy.example:443",
            "proxy.example",
            "[fd00::1]:8080",
        ] {
            assert!(
                g.check("GET", &seg("/health"), Some(ok), None, None)
                    .is_ok(),
                "{ok}"
            );
        }
        for bad in [
            Some("evil.com"),
            Some("127.0.0.1:9999"),
            Some("localhost"),
            Some("brain.lan"),
            Some("brain.lan:9999"),
            Some("proxy.example:7420"),
            Some("[fd00::1]"),
            None,
        ] {
            assert_eq!(
                g.check("GET", &seg("/health"), bad, None, None)
                    .unwrap_err()
                    .code,
                "forbidden_host",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn cross_origin_state_changes_are_refused() {
        let g = guards(None);
        let host = Some("127.0.0.1:7420");
        assert!(
            g.check("POST", &seg("/v1/sessions"), host, None, None)
                .is_ok(),
            "no Origin: a program"
        );
        assert!(
            g.check(
                "POST",
                &seg("/v1/sessions"),
                host,
                Some("http://127.0.0.1:7420"),
                None
            )
            .is_ok()
        );
        assert!(
            g.check(
                "GET",
                &seg("/v1/sessions"),
                host,
                Some("http://evil.com"),
                None
            )
            .is_ok()
        );
        for bad in ["http://evil.com", "null", "http://127.0.0.1:7420.evil.com"] {
            let e = g
                .check("POST", &seg("/v1/sessions"), host, Some(bad), None)
                .unwrap_err();
            assert_eq!(e.code, "forbidden_origin", "{bad}");
        }
    }

    #[test]
    fn with_a_token_v1_needs_it_and_any_host_is_fine() {
        let g = guards(Some("s3cret"));
        let host = Some("my-machine:7420");
        assert!(g.check("GET", &seg("/health"), host, None, None).is_ok());
        assert_eq!(
            g.check("GET", &seg("/v1/sessions"), host, None, None)
                .unwrap_err()
                .code,
            "unauthorized"
        );
        assert_eq!(
            g.check("GET", &seg("/v1/sessions"), host, None, Some("Bearer nope"))
                .unwrap_err()
                .code,
            "unauthorized"
        );
        assert!(
            g.check(
                "GET",
                &seg("/v1/sessions"),
                host,
                None,
                Some("Bearer s3cret")
            )
            .is_ok()
        );
        assert!(
            g.check(
                "POST",
                &seg("/v1/sessions"),
                host,
                Some("http://my-machine:7420"),
                Some("Bearer s3cret")
            )
            .is_ok()
        );
    }

    #[test]
    fn the_token_guards_every_route_but_the_public_ones_and_its_scheme_is_any_case() {
        let g = guards(Some("s3cret"));
        let host = Some("h:1");
        for path in [
            "/v1/sessions",
            "/v1",
            "/v2/anything",
            "/healthz",
            "/x/health",
            "/sessions",
        ] {
            assert_eq!(
                g.check("GET", &seg(path), host, None, None)
                    .unwrap_err()
                    .code,
                "unauthorized",
                "{path}"
            );
        }
        for path in [
            "/",
            "/health",
            "/favicon.ico",
            "/sessions/abc",
            "/assets/app.js",
        ] {
            assert!(
                g.check("GET", &seg(path), host, None, None).is_ok(),
                "{path}"
            );
        }
        for auth in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER  s3cret ",
            "bEaReR s3cret",
        ] {
            assert!(
                g.check("GET", &seg("/v1/sessions"), host, None, Some(auth))
                    .is_ok(),
                "{auth}"
            );
        }
        for auth in [
            "Basic s3cret",
            "Bearers3cret",
            "s3cret",
            "Bearer s3cret2",
            "Bearer",
        ] {
            assert!(
                g.check("GET", &seg("/v1/sessions"), host, None, Some(auth))
                    .is_err(),
                "{auth}"
            );
        }
    }

    #[test]
    fn constant_time_eq_is_eq() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
