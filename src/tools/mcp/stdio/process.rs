//! The server's process: how it is started, and how it is seen to exit and killed with
//! its group.

use std::process::{Child, Command, Stdio};

use super::{INHERITED_ENV, Spawn};
use crate::tools::mcp::groups::Groups;

/// The command that starts the server: only the environment it is given, piped stdio,
/// its own process group and (on Linux) death with brain.
pub(super) fn command(how: &Spawn) -> Command {
    let mut cmd = Command::new(&how.command);
    // Only the environment the configuration names, plus PATH and HOME (SPEC §12): a
    // server never sees brain's API keys or token.
    cmd.env_clear();
    for name in INHERITED_ENV {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd.args(&how.args)
        .envs(how.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = &how.cwd {
        cmd.current_dir(dir);
    }
    #[cfg(unix)]
    {
        // Its own process group: a Ctrl-C meant for brain does not reach it before
        // brain closes it, and closing can end its children too (`npx` runs `node`),
        // as can the next start after a SIGKILL (`spawn` records the group).
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    #[cfg(target_os = "linux")]
    {
        // Killed with brain: a brain that is SIGKILLed cannot close it, and a server
        // stuck in a call does not notice its stdin closing. The signal follows the
        // thread that spawns it, a server's supervisor, which lives as long as brain
        // serves. Its own children (`npx` runs `node`, a shell's `cmd &`) do not
        // inherit it: the next start kills what is left of its group.
        use std::os::unix::process::CommandExt;
        // SAFETY: between fork and exec only async-signal-safe calls: prctl(2).
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd
}

/// Kills the server's whole group (a wrapper's children go too), forgets the group's
/// record, and reaps the server.
pub(super) fn kill_group(child: &mut Child, groups: Option<&Groups>) {
    #[cfg(unix)]
    {
        // Its pid is its group's id (`process_group(0)`), and it cannot be reused while
        // the process is not reaped: `close` waits for it without reaping, and the reap
        // comes last, so the signal never reaches a group that took the id since.
        let pgid = child.id() as libc::pid_t;
        // SAFETY: kill(2) with a negative pid signals that process group; no memory is
        // touched.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    if let Some(groups) = groups {
        groups.forget(child.id());
    }
    let _ = child.wait();
}

/// Whether the server has exited, without reaping it (its pid stays taken until
/// [`kill_group`] has signalled its group).
#[cfg(target_os = "linux")]
pub(super) fn exited(child: &mut Child) -> bool {
    let pid: libc::id_t = child.id();
    // SAFETY: an all-zero siginfo_t is a valid value of the plain C struct.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid(2) writes only the siginfo_t it is given. With WNOHANG and nothing
    // to report it leaves si_pid as zeroed above; WNOWAIT leaves the child unreaped.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid reads a field waitid filled (or left zero).
    r != 0 || unsafe { info.si_pid() } != 0
}

/// Elsewhere no group is recorded, and a reap before the kill is what there is.
#[cfg(not(target_os = "linux"))]
pub(super) fn exited(child: &mut Child) -> bool {
    !matches!(child.try_wait(), Ok(None))
}
