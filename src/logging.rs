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

/// `brain chat` on a terminal: records go to `brain/chat.log` in the data directory
/// (appended, the user's only), so none is printed over the prompt or an answer; through
/// a pipe, or without a data directory, standard error as [`init`]. Default `warn`.
pub fn init_for_chat() {
    use std::io::IsTerminal;
    let file = std::io::stderr()
        .is_terminal()
        .then(chat_log_file)
        .flatten();
    let env = env_logger::Env::default().default_filter_or("warn");
    let mut builder = env_logger::Builder::from_env(env);
    builder.format_timestamp_micros();
    match file {
        Some(f) => builder.target(env_logger::Target::Pipe(Box::new(f))),
        None => builder.target(env_logger::Target::Stderr),
    };
    let _ = builder.try_init();
}

fn chat_log_file() -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = dirs::data_dir()?.join("brain");
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.join("chat.log"))
        .ok()
}
