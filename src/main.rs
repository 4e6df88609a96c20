//! The `brain` binary: parse arguments, run the command, map errors to an exit code.

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = brain::cli::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    // Only the server logs what it does; other commands print what was asked for.
    let serving = matches!(cli.command, None | Some(brain::cli::Command::Serve(_)));
    if matches!(cli.command, Some(brain::cli::Command::Chat(_))) {
        // Nothing over the prompt: on a terminal the chat's log goes to a file.
        brain::logging::init_for_chat();
    } else {
        brain::logging::init(if serving { "info" } else { "warn" });
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = brain::cli::run(cli, &mut out).and_then(|()| Ok(out.flush()?));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            // Errors can quote a file or a server: never let them drive the terminal.
            eprintln!("brain: {}", brain::cli::term::printable(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}
