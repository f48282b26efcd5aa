//! Files written and looked up the same way by every crate: replaced atomically, found
//! relative to the working folder or else the source tree, and folders taken by one process.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Replaces `path` with `contents` at once: they are written to a fresh temporary file beside
/// it (a name of its own, so two processes writing the same file cannot mix their bytes) and
/// renamed over it. A reader sees the old file or the new one, never a half-written one, and
/// an interrupted write leaves the old file. A link is followed, as a plain write follows it:
/// the file it names is replaced. Anything else that is not a regular file (a device such as
/// `/dev/full`, a FIFO, a folder) is refused: the rename would replace the node itself.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let (file, target) = stage(path, contents)?;
    file.persist(target).map(drop).map_err(|err| err.error)
}

/// Replaces each `(path, contents)` of `files` as [`write_atomically`] does, all or none as
/// far as the disk allows: every file is written beside its target before the first is
/// renamed over it, so a refused target, a full disk or a failed write leaves every old file
/// as it was (only a failing rename, after the others succeeded, could split them). An error
/// names the file it is about.
pub fn write_all_atomically(files: &[(&Path, &[u8])]) -> io::Result<()> {
    let named = |path: &Path, err: io::Error| {
        io::Error::new(err.kind(), format!("{}: {err}", path.display()))
    };
    let staged = files
        .iter()
        .map(|&(path, contents)| stage(path, contents).map_err(|err| named(path, err)))
        .collect::<io::Result<Vec<_>>>()?;
    for (file, target) in staged {
        file.persist(&target)
            .map_err(|err| named(&target, err.error))?;
    }
    Ok(())
}

/// Checks, before long work, that [`write_atomically`] could replace `path` now: its target
/// is absent or a regular file, and its folder takes a new file (one is made and removed). A
/// run that writes its results at the end calls this first, so that a missing folder or a
/// refused target loses no work.
pub fn check_replaceable(path: &Path) -> io::Result<()> {
    stage(path, &[]).map(drop)
}

/// `contents` written and synced to a temporary file beside `path`'s target (a link
/// followed), with that target; refused when the target exists and is not a regular file.
fn stage(path: &Path, contents: &[u8]) -> io::Result<(tempfile::NamedTempFile, PathBuf)> {
    let path = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => std::fs::canonicalize(path)?,
        _ => path.to_path_buf(),
    };
    if let Ok(meta) = std::fs::metadata(&path)
        && !meta.is_file()
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file: only a file is replaced",
        ));
    }
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
        let mode = std::fs::metadata(&path).map_or(0o644, |m| m.permissions().mode() & 0o7777);
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    file.as_file().sync_all()?;
    Ok((file, path))
}

/// The largest configuration (TOML, JSON job) [`read_bounded`]'s callers take: 16 MiB.
pub const CONFIG_LIMIT: u64 = 16 << 20;

/// The largest data file (IDX, qRNG bit strings, OHLCV bars) the readers take: 4 GiB.
pub const DATA_LIMIT: u64 = 4 << 30;

/// Opens the regular file `path` for reading, refusing anything else (a FIFO, a device such
/// as `/dev/urandom`, a folder) before reading a byte. The file is opened without blocking, so
/// a FIFO with no writer is refused rather than waited on (on a regular file the flag changes
/// nothing).
pub fn open_regular(path: &Path) -> io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a folder, FIFO, socket or device)",
        ));
    }
    Ok(file)
}

/// Reads the regular file `path` ([`open_regular`]), refusing any file longer than `limit`
/// bytes.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let file = open_regular(path)?;
    let meta = file.metadata()?;
    if meta.len() > limit {
        return Err(too_long(meta.len(), limit));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // The file may grow while it is read: never past the limit.
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_long(bytes.len() as u64, limit));
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text; text that is not UTF-8 is an `InvalidData` error.
pub fn read_text_bounded(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_bounded(path, limit)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

fn too_long(len: u64, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{len} bytes or more, above the {limit} this reader takes"),
    )
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

/// The file that marks a folder as taken by a running process: it holds the process id, and
/// the process holds an exclusive OS lock on it.
pub const FOLDER_LOCK: &str = ".quench-run.lock";

/// A folder this process has taken ([`FolderLock::take`]) until the lock is dropped, so that two
/// runs never write the same files.
///
/// The lock is the operating system's (`File::try_lock`: `flock` on Unix, `LockFileEx` on
/// Windows), so the kernel releases it when the process ends, however it ends: a lock file left
/// by a process that was killed, or one naming a live process that never held it (a reused
/// id, PID 1 in a container), holds nothing and is taken over.
#[derive(Debug)]
pub struct FolderLock {
    lock: PathBuf,
    /// Open for as long as the folder is ours: closing it releases the OS lock.
    _file: std::fs::File,
}

impl FolderLock {
    /// Takes `dir` for this process: locks [`FOLDER_LOCK`] in it and writes our process id
    /// there, or refuses (`AlreadyExists`) while another process holds the lock. A path at
    /// [`FOLDER_LOCK`] that is not a regular file is refused by name.
    pub fn take(dir: &Path) -> io::Result<Self> {
        let lock = dir.join(FOLDER_LOCK);
        // A lock file removed and made anew by its last holder between our open and our lock
        // would leave us holding a file no one else sees: retry on the new one.
        for _ in 0..8 {
            if let Ok(meta) = std::fs::symlink_metadata(&lock)
                && !meta.is_file()
            {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is not a regular file, so it cannot mark the folder as taken; remove it",
                        lock.display()
                    ),
                ));
            }
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&lock)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let holder = std::fs::read_to_string(&lock).unwrap_or_default();
                    let holder = match holder.trim() {
                        "" => String::new(),
                        pid => format!(" (process {pid})"),
                    };
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "another benchmark run{holder} is writing there; wait for it or \
                             choose another folder"
                        ),
                    ));
                }
                Err(std::fs::TryLockError::Error(err)) => return Err(err),
            }
            if !same_file(&file, &lock) {
                continue;
            }
            file.set_len(0)?;
            write!(file, "{}", std::process::id())?;
            return Ok(Self { lock, _file: file });
        }
        Err(io::Error::other(format!(
            "{} kept being replaced while it was taken",
            lock.display()
        )))
    }

    /// The lock file, for a handler that must give the folder back without dropping (a
    /// process that exits skips `Drop`; the OS lock goes with the process).
    pub fn path(&self) -> &Path {
        &self.lock
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        // Removed while still locked (the file closes after this), so no other process takes
        // the old file; a run that opened it meanwhile sees it replaced and retries.
        let _ = std::fs::remove_file(&self.lock);
    }
}

/// Whether the open `file` is still the file at `path` (on Unix, the same device and inode;
/// elsewhere assumed).
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), std::fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
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
    fn a_replaceable_target_is_checked_without_leaving_anything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chains.json");
        check_replaceable(&path).unwrap();
        assert!(!path.exists(), "the check writes no target");
        std::fs::write(&path, b"kept").unwrap();
        check_replaceable(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"kept");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary left: {names:?}");
        assert!(check_replaceable(&dir.path().join("absent").join("x.json")).is_err());
        assert!(
            check_replaceable(dir.path()).is_err(),
            "a folder is not replaced"
        );
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

    #[test]
    fn a_folder_lock_is_the_os_lock_not_the_id_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join(FOLDER_LOCK);
        // A stale file naming a live process (PID 1, as in a container) holds nothing.
        std::fs::write(&lock, "1").unwrap();
        let first = FolderLock::take(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&lock).unwrap(),
            std::process::id().to_string()
        );
        // While it is held, a second taker (another open file description, as another process
        // would have) is refused with the holder's id.
        let err = FolderLock::take(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(
            err.to_string()
                .contains(&format!("process {}", std::process::id())),
            "{err}"
        );
        drop(first);
        assert!(!lock.exists(), "the lock file goes with its run");
        drop(FolderLock::take(dir.path()).unwrap());
    }

    #[test]
    fn a_lock_path_that_is_a_folder_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(FOLDER_LOCK)).unwrap();
        let err = FolderLock::take(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("is not a regular file")
                && err.to_string().contains(FOLDER_LOCK),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.toml");
        std::fs::write(&file, b"x = 1\n").unwrap();
        assert_eq!(read_bounded(&file, 6).unwrap(), b"x = 1\n");
        let err = read_bounded(&file, 5).unwrap_err();
        assert!(err.to_string().contains("above the 5"), "{err}");
        for refused in [Path::new("/dev/urandom"), dir.path()] {
            let err = read_bounded(refused, CONFIG_LIMIT).unwrap_err();
            assert!(err.to_string().contains("not a regular file"), "{err}");
        }
        // A FIFO with no writer: refused at once, not waited on.
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let err = read_bounded(&fifo, CONFIG_LIMIT).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn files_written_together_are_all_replaced_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "old a").unwrap();
        std::fs::write(&b, "old b").unwrap();
        write_all_atomically(&[(&a, b"new a"), (&b, b"new b")]).unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "new a");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "new b");
        // The second target cannot be replaced: the first keeps its old contents, the error
        // names the second, and no temporary file is left.
        let folder = dir.path().join("folder");
        std::fs::create_dir(&folder).unwrap();
        let err = write_all_atomically(&[(&a, b"newer a"), (&folder, b"x")]).unwrap_err();
        assert!(
            err.to_string().contains("folder") && err.to_string().contains("not a regular file"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "new a");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 3, "{left:?}");
    }

    #[test]
    fn only_files_are_replaced_and_links_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        for refused in [fifo.as_path(), dir.path()] {
            let err = write_atomically(refused, b"x").unwrap_err();
            assert!(err.to_string().contains("not a regular file"), "{err}");
        }
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo()
        );
        #[cfg(unix)]
        {
            let target = dir.path().join("target.json");
            let link = dir.path().join("link.json");
            std::fs::write(&target, b"old").unwrap();
            std::os::unix::fs::symlink(&target, &link).unwrap();
            write_atomically(&link, b"new").unwrap();
            assert!(
                std::fs::symlink_metadata(&link)
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
            assert_eq!(std::fs::read(&target).unwrap(), b"new");
        }
    }
}
