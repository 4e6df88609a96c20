//! The HTTP API (SPEC §7, §8, §12) on a synchronous, threaded tiny_http server: a fixed
//! pool of worker threads answers requests; each SSE stream gets its own thread.
//!
//! - [`error`]: the one mapping from typed errors to status and code.
//! - [`guards`]: Host, Origin and bearer checks.
//! - [`http`]: query strings, JSON bodies under a limit, answers, SSE.
//! - [`routes`]: what each route does.
//! - [`views`]: the JSON shapes of sessions, events and hits.
//!
//! **Architecture invariant:** only `api` knows HTTP and the wire shapes of the API.

pub mod assets;
pub mod error;
pub mod guards;
pub mod http;
pub mod routes;
pub mod views;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crate::chat::engine::Engine;
use crate::tokens::Estimator;

/// Request-handling threads (SSE streams have their own).
pub const WORKER_THREADS: usize = 8;

/// The server's own settings.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    pub listen: SocketAddr,
    pub token: Option<String>,
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    /// The system prompt of sessions created without one.
    pub system_prompt: String,
}

/// Everything a request may need.
pub struct Api {
    pub engine: Engine,
    pub config: ApiConfig,
    pub guards: guards::Guards,
    pub estimator: Estimator,
}

/// A running server.
pub struct Running {
    server: Arc<tiny_http::Server>,
    workers: Vec<JoinHandle<()>>,
    /// The address it listens on (the real port when 0 was asked for).
    pub addr: SocketAddr,
}

impl Running {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops taking requests (streams already open finish on their own threads).
    pub fn stop(self) {
        for _ in &self.workers {
            self.server.unblock();
        }
        for w in self.workers {
            let _ = w.join();
        }
    }
}

/// Binds and starts serving.
pub fn start(config: ApiConfig, engine: Engine) -> Result<Running, String> {
    let cannot = |e: &dyn std::fmt::Display| format!("cannot listen on {}: {e}", config.listen);
    let listener = std::net::TcpListener::bind(config.listen).map_err(|e| cannot(&e))?;
    // Accepted connections inherit TCP_NODELAY (Linux). Without it, an answer written in two
    // pieces (headers, then a body over the buffer) waits for the client's delayed ACK:
    // `GET /v1/sessions` fell to ~90 requests/s under wrk.
    socket2::SockRef::from(&listener)
        .set_tcp_nodelay(true)
        .map_err(|e| cannot(&e))?;
    let server = tiny_http::Server::from_listener(listener, None).map_err(|e| cannot(&e))?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| "the server has no IP address".to_owned())?;
    let guards = guards::Guards::new(addr, config.token.clone(), &config.allowed_hosts);
    let api = Arc::new(Api {
        engine,
        config: ApiConfig {
            listen: addr,
            ..config
        },
        guards,
        estimator: Estimator::new(),
    });
    let server = Arc::new(server);
    let workers = (0..WORKER_THREADS)
        .map(|_| {
            let (server, api) = (Arc::clone(&server), Arc::clone(&api));
            thread::spawn(move || {
                while let Ok(req) = server.recv() {
                    routes::handle(&api, req);
                }
            })
        })
        .collect();
    Ok(Running {
        server,
        workers,
        addr,
    })
}
