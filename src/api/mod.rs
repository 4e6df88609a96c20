//! The HTTP API (SPEC §7, §8, §12) on brain's own small HTTP/1.1 server: one thread per
//! connection, every connection under deadlines and a cap (see [`server`] for the
//! connection model), request heads parsed by `httparse` and judged before any body is read.
//!
//! - [`refuse`]: refusing a connection with 503 so that its client reads it.
//! - [`server`]: the listener, the connection registry and its cap, shutdown.
//! - [`sockopt`]: socket options bounding what a stalled client leaves in the kernel.
//! - [`conn`]: one connection's life: deadlines, body framing, keep-alive, streams.
//! - [`request`]: parsing and judging a head: framing, the request-target (pure).
//! - [`error`]: the one mapping from typed errors to status and code.
//! - [`guards`]: Host, Origin and bearer checks.
//! - [`http`]: answers, JSON bodies, SSE.
//! - [`routes`]: what each route does.
//! - [`views`]: the JSON shapes of sessions, events, hits and import reports.
//! - [`import`], [`upload`]: `POST /v1/import`, its body kept in a temporary file.
//!
//! **Architecture invariant:** only `api` knows HTTP and the wire shapes of the API.

pub mod assets;
pub mod conn;
pub mod dbhealth;
pub mod error;
pub mod guards;
pub mod http;
pub mod import;
pub mod refuse;
pub mod request;
pub mod routes;
pub mod server;
pub mod sockopt;
pub mod upload;
pub mod views;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub use server::Running;

use crate::chat::engine::Engine;
use crate::tokens::Estimator;

/// Default for `--request-timeout`: a request's head and body must arrive within it.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Default for `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// How long a kept-alive connection may sit between requests before it is closed.
pub const KEEP_ALIVE_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The server's own settings.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    pub listen: SocketAddr,
    pub token: Option<String>,
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    /// The largest export `POST /v1/import` takes (and reads out of a zip).
    pub max_import_bytes: u64,
    /// How long a request's head and body may take to arrive.
    pub request_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// The most connections open at once (lowered to fit the open-file limit).
    pub max_connections: usize,
    /// The system prompt of sessions created without one.
    pub system_prompt: String,
}

/// Everything a request may need.
pub struct Api {
    pub engine: Engine,
    pub config: ApiConfig,
    pub guards: guards::Guards,
    pub estimator: Estimator,
    /// `/health`'s last known state of the database.
    pub db_health: dbhealth::DbHealth,
    /// One import at a time.
    pub imports: import::Gate,
}

/// Binds and starts serving.
pub fn start(config: ApiConfig, engine: Engine) -> Result<Running, String> {
    let cannot = |e: &dyn std::fmt::Display| format!("cannot listen on {}: {e}", config.listen);
    let listener = std::net::TcpListener::bind(config.listen).map_err(|e| cannot(&e))?;
    let addr = listener.local_addr().map_err(|e| cannot(&e))?;
    let guards = guards::Guards::new(addr, config.token.clone(), &config.allowed_hosts);
    let cap = server::connection_cap(config.max_connections);
    let shared = Arc::new(server::Shared {
        connections: server::Connections::new(cap),
        stopping: AtomicBool::new(false),
        request_timeout: config.request_timeout,
        idle_timeout: config.idle_timeout,
        refuser: refuse::Refuser::default(),
        api: Arc::new(Api {
            engine,
            config: ApiConfig {
                listen: addr,
                ..config
            },
            guards,
            estimator: Estimator::new(),
            db_health: dbhealth::DbHealth::default(),
            imports: import::Gate::default(),
        }),
    });
    server::run(listener, shared, addr)
}
