//! Files written and looked up the same way by every crate: replaced atomically, found
//! relative to the working folder or else the source tree, and folders taken by one process.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Replaces `path` with `contents` at once: they are written to a fresh temporary file beside
/// it (a name of its own, so two processes writing the same file cannot mix their bytes) and
/// renamed over it. A reader sees the old file or the new one, never a half-written one, and
/// an interrupted write leaves the old file.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new()
        .prefix(".quench-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    file.write_all(contents)?;
    // Temporary files are private (0600); the file replaced keeps its mode, a new one gets the
    // usual 0644, as a plain write would under the common umask.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).map_or(0o644, |m| m.permissions().mode() & 0o7777);
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    file.as_file().sync_all()?;
    file.persist(path).map(drop).map_err(|err| err.error)
}

/// `path` as given when it is absolute or exists from the working folder; else the same
/// relative path in the source tree, where the repository's configurations and data live.
pub fn in_working_folder_or_source_tree(path: &Path) -> PathBuf {
    if path.is_relative() && !path.exists() {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path)
    } else {
        path.to_path_buf()
    }
}

/// The file that marks a folder as taken by a running process; it holds the process id.
pub const FOLDER_LOCK: &str = ".quench-run.lock";

/// A folder this process has taken ([`FolderLock::take`]) until the lock is dropped, so that two
/// runs never write the same files.
#[derive(Debug)]
pub struct FolderLock {
    lock: PathBuf,
}

impl FolderLock {
    /// Takes `dir` for this process: creates [`FOLDER_LOCK`] in it with our process id, or
    /// refuses (`AlreadyExists`) while the process it names still runs. A lock left by a process
    /// that is gone (killed outright) is taken over.
    pub fn take(dir: &Path) -> io::Result<Self> {
        let lock = dir.join(FOLDER_LOCK);
        for _ in 0..2 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)
            {
                Ok(mut file) => {
                    write!(file, "{}", std::process::id())?;
                    return Ok(Self { lock });
                }
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                    let holder = std::fs::read_to_string(&lock).unwrap_or_default();
                    let holder = holder.trim();
                    if process_runs(holder) {
                        return Err(io::Error::new(
                            io::ErrorKind::AlreadyExists,
                            format!(
                                "another benchmark run (process {holder}) is writing there; wait \
                                 for it or choose another folder"
                            ),
                        ));
                    }
                    // Stale: its process is gone. Whoever removes it first retakes the folder.
                    let _ = std::fs::remove_file(&lock);
                }
                Err(err) => return Err(err),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "another benchmark run took the folder at the same moment",
        ))
    }

    /// The lock file, for a handler that must give the folder back without dropping (a
    /// process that exits skips `Drop`).
    pub fn path(&self) -> &Path {
        &self.lock
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        // Only our own lock: a folder taken over after ours went stale is the other run's.
        if std::fs::read_to_string(&self.lock)
            .is_ok_and(|pid| pid.trim() == std::process::id().to_string())
        {
            let _ = std::fs::remove_file(&self.lock);
        }
    }
}

/// Whether `pid` names a running process (on Linux, a `/proc` entry); elsewhere any readable
/// id counts as running, and a stale lock is the user's to remove.
fn process_runs(pid: &str) -> bool {
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    if cfg!(target_os = "linux") {
        Path::new("/proc").join(pid.to_string()).exists()
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_files_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second, longer").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "readable like a plainly written file");
        }
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let missing = dir.path().join("absent").join("x.json");
        assert!(write_atomically(&missing, b"x").is_err());
    }

    #[test]
    fn concurrent_writers_never_mix_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let texts: Vec<Vec<u8>> = (0..8u8).map(|i| vec![b'a' + i; 4096]).collect();
        std::thread::scope(|s| {
            for text in &texts {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..20 {
                        write_atomically(path, text).unwrap();
                    }
                });
            }
        });
        let last = std::fs::read(&path).unwrap();
        assert!(texts.contains(&last), "one writer's whole text");
    }

    #[test]
    fn relative_paths_fall_back_to_the_source_tree() {
        let found = in_working_folder_or_source_tree(Path::new("configs/quick.toml"));
        assert!(found.is_file(), "{}", found.display());
        let absolute = Path::new("/nonexistent/x.toml");
        assert_eq!(in_working_folder_or_source_tree(absolute), absolute);
    }
}
