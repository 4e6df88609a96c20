//! The server's log: one line per record on standard error, with a UTC timestamp, the
//! level and the module. `RUST_LOG` chooses what is shown (`RUST_LOG=debug` adds a line
//! per request; `RUST_LOG=brain::provider=debug` narrows it), default `info`: warnings for
//! provider faults, errors for storage, and what the server is doing. Other commands
//! default to `warn`: their terminal shows what was asked for, not migrations applied.

/// Installs the logger once with `default` as the level when `RUST_LOG` is unset; later
/// calls (tests, a second command in one process) are no-ops.
pub fn init(default: &str) {
    let env = env_logger::Env::default().default_filter_or(default);
    let _ = env_logger::Builder::from_env(env)
        .format_timestamp_micros()
        .target(env_logger::Target::Stderr)
        .try_init();
}
