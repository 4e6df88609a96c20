//! Who may talk to the server (SPEC §12): the `Host` check against DNS rebinding (when no
//! token is set), the `Origin` check against cross-site requests, and bearer tokens
//! compared in constant time.

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
            if !h.is_empty() {
                hosts.push(format!("{h}:{port}"));
                hosts.push(h);
            }
        }
        Guards { token, hosts }
    }

    fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// Checks one request: its `Host` (without a token), its `Origin` (state-changing
    /// requests), its bearer token (`/v1` routes, with a token).
    pub fn check(
        &self,
        method: &str,
        path: &str,
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
        if let (Some(token), true) = (&self.token, path.starts_with("/v1/") || path == "/v1") {
            let given = authorization
                .and_then(|a| a.strip_prefix("Bearer "))
                .unwrap_or("");
            if !constant_time_eq(given.trim().as_bytes(), token.as_bytes()) {
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

    fn guards(token: Option<&str>) -> Guards {
        Guards::new(
            "127.0.0.1:7420".parse().unwrap(),
            token.map(str::to_owned),
            &["brain.lan".into()],
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
            "brain.lan",
            "brain.lan:7420",
        ] {
            assert!(
                g.check("GET", "/health", Some(ok), None, None).is_ok(),
                "{ok}"
            );
        }
        for bad in [
            Some("evil.com"),
            Some("127.0.0.1:9999"),
            Some("localhost"),
            None,
        ] {
            assert_eq!(
                g.check("GET", "/health", bad, None, None).unwrap_err().code,
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
            g.check("POST", "/v1/sessions", host, None, None).is_ok(),
            "no Origin: a program"
        );
        assert!(
            g.check(
                "POST",
                "/v1/sessions",
                host,
                Some("http://127.0.0.1:7420"),
                None
            )
            .is_ok()
        );
        assert!(
            g.check("GET", "/v1/sessions", host, Some("http://evil.com"), None)
                .is_ok()
        );
        for bad in ["http://evil.com", "null", "http://127.0.0.1:7420.evil.com"] {
            let e = g
                .check("POST", "/v1/sessions", host, Some(bad), None)
                .unwrap_err();
            assert_eq!(e.code, "forbidden_origin", "{bad}");
        }
    }

    #[test]
    fn with_a_token_v1_needs_it_and_any_host_is_fine() {
        let g = guards(Some("s3cret"));
        let host = Some("my-machine:7420");
        assert!(g.check("GET", "/health", host, None, None).is_ok());
        assert_eq!(
            g.check("GET", "/v1/sessions", host, None, None)
                .unwrap_err()
                .code,
            "unauthorized"
        );
        assert_eq!(
            g.check("GET", "/v1/sessions", host, None, Some("Bearer nope"))
                .unwrap_err()
                .code,
            "unauthorized"
        );
        assert!(
            g.check("GET", "/v1/sessions", host, None, Some("Bearer s3cret"))
                .is_ok()
        );
        assert!(
            g.check(
                "POST",
                "/v1/sessions",
                host,
                Some("http://my-machine:7420"),
                Some("Bearer s3cret")
            )
            .is_ok()
        );
    }

    #[test]
    fn constant_time_eq_is_eq() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
