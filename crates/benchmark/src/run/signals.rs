//! The signals that stop a run: Ctrl-C's SIGINT, and SIGTERM and SIGHUP, which `timeout`,
//! Slurm, `docker stop`, systemd and a closed terminal send, and the others whose default is
//! to end the process (SIGQUIT, which Ctrl-\\ sends; SIGUSR1, SIGUSR2, SIGALRM; not SIGKILL,
//! which no process can catch). Each is handled as Ctrl-C always was: the report kept, marked
//! interrupted, the folder given back, exit 128 + the signal. (SIGQUIT ends without its core
//! dump: the report is what a run leaves.)

/// A stopping signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    /// Its name, as the report and the message give it (`SIGTERM`).
    pub name: &'static str,
    /// Its number: the process exits with 128 + this.
    pub number: i32,
}

/// Calls `handler` on a thread of its own when the first stopping signal arrives; `handler`
/// is expected to exit the process.
///
/// # Errors
/// When the handler cannot be installed.
pub fn on_stop(handler: impl FnOnce(Signal) + Send + 'static) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use anyhow::Context as _;
        use signal_hook::consts::{SIGALRM, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
        const STOPPING: [(i32, &str); 7] = [
            (SIGINT, "SIGINT"),
            (SIGTERM, "SIGTERM"),
            (SIGHUP, "SIGHUP"),
            (SIGQUIT, "SIGQUIT"),
            (SIGUSR1, "SIGUSR1"),
            (SIGUSR2, "SIGUSR2"),
            (SIGALRM, "SIGALRM"),
        ];
        let mut signals = signal_hook::iterator::Signals::new(STOPPING.map(|(number, _)| number))
            .context("cannot install the handler of the stopping signals")?;
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                if let Some(number) = signals.forever().next() {
                    let name = STOPPING
                        .iter()
                        .find_map(|&(n, name)| (n == number).then_some(name))
                        .unwrap_or("a stopping signal");
                    handler(Signal { name, number });
                }
            })
            .context("cannot start the signal thread")?;
        Ok(())
    }
    #[cfg(not(unix))]
    {
        use anyhow::Context as _;
        let handler = std::sync::Mutex::new(Some(handler));
        ctrlc::set_handler(move || {
            let taken = handler.lock().ok().and_then(|mut h| h.take());
            if let Some(handler) = taken {
                handler(Signal {
                    name: "Ctrl-C",
                    number: 2,
                });
            }
        })
        .context("cannot install the Ctrl-C handler")
    }
}
