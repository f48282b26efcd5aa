//! Where CubeCL keeps what it compiles and tunes: a folder that outlives the process, so a GPU
//! run starts warm the second time.
//!
//! CubeCL (the runtime of Burn's CUDA and wgpu backends) compiles every kernel on first use in
//! every process (NVRTC on CUDA) and autotunes every matmul and reduction shape by compiling and
//! timing candidates; it keeps neither unless configured, and its default autotune folder is
//! the nearest Cargo project's `target/`. Quench points both caches at one folder instead,
//! chosen in this order:
//!
//! 1. [`set_cache_dir`] (the benchmark's `--cache-dir`);
//! 2. the environment variable [`CACHE_DIR_ENV`] (`QUENCH_CACHE_DIR`);
//! 3. a `cubecl.toml` (or `burn.toml`'s `[cubecl]` section) in the working folder or above that
//!    names a cache itself: CubeCL's own file keeps its say over the cache it names;
//! 4. `$XDG_CACHE_HOME/quench/cubecl`, or `~/.cache/quench/cubecl` when that is unset.
//!
//! CubeCL reads its configuration once per process, when a device is first used, so the choice
//! is made then ([`install`], called by `quench_device::select`). A kernel whose source changed hashes
//! differently and is compiled again; a stale folder costs time, never results. On wgpu CubeCL
//! caches compiled kernels only for SPIR-V shaders, so there the folder mostly holds autotune
//! results.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::BackendError;

/// The environment variable that names the cache folder.
pub const CACHE_DIR_ENV: &str = "QUENCH_CACHE_DIR";

/// The folder given by [`set_cache_dir`].
static FLAG_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Who chose the cache folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChosenBy {
    /// [`set_cache_dir`] (a command-line flag).
    Flag,
    /// The environment variable [`CACHE_DIR_ENV`].
    Environment,
    /// This CubeCL configuration file, which names the caches itself.
    CubeclFile(PathBuf),
    /// Quench's default under the user's cache folder.
    Default,
}

/// Where compiled kernels and autotune results are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheLocation {
    /// The folder Quench gives CubeCL; `None` when a CubeCL file names the caches itself or
    /// there is no home folder to put a default in.
    pub dir: Option<PathBuf>,
    /// Who chose it.
    pub chosen_by: ChosenBy,
}

impl std::fmt::Display for CacheLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.dir, &self.chosen_by) {
            (_, ChosenBy::CubeclFile(file)) => write!(f, "as set in {}", file.display()),
            (Some(dir), ChosenBy::Flag) => write!(f, "{} (--cache-dir)", dir.display()),
            (Some(dir), ChosenBy::Environment) => write!(f, "{} ({CACHE_DIR_ENV})", dir.display()),
            (Some(dir), _) => write!(f, "{}", dir.display()),
            (None, _) => write!(
                f,
                "none (no home folder; set {CACHE_DIR_ENV} to keep kernels between runs)"
            ),
        }
    }
}

/// Sets the cache folder for this process, above the environment and any CubeCL file. It must
/// come before the first GPU device is used.
///
/// # Errors
/// When a folder was already set, or `dir` exists and is not a folder (refused on any device,
/// as a flag the run could not follow).
pub fn set_cache_dir(dir: &Path) -> Result<(), BackendError> {
    if dir.exists() && !dir.is_dir() {
        return Err(BackendError::KernelCache {
            dir: dir.to_path_buf(),
            reason: "not a folder".into(),
        });
    }
    FLAG_DIR
        .set(dir.to_path_buf())
        .map_err(|_| BackendError::KernelCache {
            dir: dir.to_path_buf(),
            reason: "a cache folder was already set for this process".into(),
        })
}

/// The cache folder this process uses (or would use, before the first GPU device).
pub fn location() -> CacheLocation {
    if let Some(dir) = FLAG_DIR.get() {
        return CacheLocation {
            dir: Some(dir.clone()),
            chosen_by: ChosenBy::Flag,
        };
    }
    if let Some(dir) = std::env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
        return CacheLocation {
            dir: Some(PathBuf::from(dir)),
            chosen_by: ChosenBy::Environment,
        };
    }
    if let Some(file) = std::env::current_dir()
        .ok()
        .and_then(|dir| cubecl_file_naming_a_cache(&dir))
    {
        return CacheLocation {
            dir: None,
            chosen_by: ChosenBy::CubeclFile(file),
        };
    }
    CacheLocation {
        dir: default_dir(),
        chosen_by: ChosenBy::Default,
    }
}

/// `$XDG_CACHE_HOME/quench/cubecl`, or `$HOME/.cache/quench/cubecl`; `None` without either.
pub fn default_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .map(|home| PathBuf::from(home).join(".cache"))
        })?;
    Some(base.join("quench").join("cubecl"))
}

/// What a cache folder holds: entries of its tables of contents, as CubeCL writes them (JSON
/// lines in `*.json.log` files; compiled kernels themselves sit in binary chunks beside them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheEntries {
    /// Compiled kernels (the `ptx` table on CUDA; SPIR-V on wgpu).
    pub kernels: usize,
    /// Autotuned shapes (matmul, reductions): one entry per key, its candidates' timings inside.
    pub tuned: usize,
    /// Bytes of every file in the folder.
    pub bytes: u64,
}

/// Counts what the cache folder `dir` holds; all zero when it does not exist.
pub fn entries(dir: &Path) -> CacheEntries {
    fn walk(dir: &Path, depth: usize, in_autotune: bool, found: &mut CacheEntries) {
        // CubeCL nests kind/version/device/name; 8 levels is well past that and stops a loop.
        let Ok(read) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in read.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            let autotune = in_autotune || entry.file_name() == "autotune";
            if kind.is_dir() && depth < 8 {
                walk(&path, depth + 1, autotune, found);
            } else if kind.is_file() {
                found.bytes += entry.metadata().map_or(0, |m| m.len());
                if !path.to_string_lossy().ends_with(".json.log") {
                    continue;
                }
                let Ok(bytes) = std::fs::read(&path) else {
                    continue;
                };
                let lines = bytes
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .count();
                if autotune {
                    found.tuned += lines;
                } else {
                    found.kernels += lines;
                }
            }
        }
    }
    let mut found = CacheEntries::default();
    walk(dir, 0, false, &mut found);
    found
}

/// The first CubeCL configuration file in `start` or above, as CubeCL looks for it, if it
/// names a compilation or autotune cache.
fn cubecl_file_naming_a_cache(start: &Path) -> Option<PathBuf> {
    let mut dir = start.to_path_buf();
    loop {
        let own = ["cubecl.toml", "CubeCL.toml"].map(|name| (name, None));
        let sections = ["burn.toml", "Burn.toml"].map(|name| (name, Some("cubecl")));
        for (name, section) in own.into_iter().chain(sections) {
            let path = dir.join(name);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            // CubeCL takes the first file it can parse; an unreadable one is skipped as it is.
            let Ok(table) = text.parse::<toml::Table>() else {
                continue;
            };
            let table = match section {
                Some(key) => match table.get(key).and_then(|v| v.as_table()) {
                    Some(inner) => inner.clone(),
                    None => continue,
                },
                None => table,
            };
            return names_a_cache(&table).then_some(path);
        }
        if !dir.pop() {
            return None;
        }
    }
}

/// Whether a CubeCL configuration sets `compilation.cache` or `autotune.cache`.
fn names_a_cache(table: &toml::Table) -> bool {
    ["compilation", "autotune"].iter().any(|section| {
        table
            .get(*section)
            .and_then(|v| v.as_table())
            .is_some_and(|t| t.contains_key("cache"))
    })
}

/// Gives CubeCL its configuration for this process, with the caches in [`location`]'s folder
/// and, when `launch_log` is given, one line per kernel launch written there, and one per
/// kernel compiled where `compilations` (see `quench_device::counters`; CubeCL's compilation
/// log makes it create a wgpu instance with debugging and validation on, which halved
/// lavapipe's speed). Does nothing when CubeCL's configuration was already read and no launch
/// log is asked for.
///
/// # Errors
/// When the chosen folder cannot be made (for a folder the user named; Quench's default falls
/// back to CubeCL's own), and when a launch log is asked for after CubeCL read its settings.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub fn install(launch_log: Option<&Path>, compilations: bool) -> Result<(), BackendError> {
    use burn::cubecl::config::cache::CacheConfig;
    use burn::cubecl::config::compilation::CompilationLogLevel;
    use burn::cubecl::config::profiling::ProfilingLogLevel;
    use burn::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};

    let mut slot = CubeClRuntimeConfig::storage().lock();
    if slot.is_some() {
        return match launch_log {
            None => Ok(()),
            Some(_) => Err(BackendError::LaunchCount(
                "CubeCL's configuration was already read; count launches from the start of the run"
                    .into(),
            )),
        };
    }
    let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
    let location = location();
    if let Some(dir) = &location.dir {
        match std::fs::create_dir_all(dir) {
            Ok(()) => {
                config.compilation.cache = Some(CacheConfig::File(dir.clone()));
                config.autotune.cache = CacheConfig::File(dir.clone());
            }
            Err(err) if location.chosen_by != ChosenBy::Default => {
                return Err(BackendError::KernelCache {
                    dir: dir.clone(),
                    reason: err.to_string(),
                });
            }
            Err(err) => tracing::warn!(
                "kernel cache folder {} cannot be made ({err}); kernels are compiled anew in \
                 every process (set {CACHE_DIR_ENV})",
                dir.display()
            ),
        }
    }
    if let Some(path) = launch_log {
        empty_launch_log(path)?;
        config.profiling.logger.level = ProfilingLogLevel::Minimal;
        config.profiling.logger.file = Some(path.to_path_buf());
        config.profiling.logger.append = false;
        if compilations {
            // A line per kernel compiled (`[Compiling kernel] name`), in the same file.
            config.compilation.logger.level = CompilationLogLevel::Basic;
            config.compilation.logger.file = Some(path.to_path_buf());
            config.compilation.logger.append = false;
        }
    }
    *slot = Some(std::sync::Arc::new(config));
    Ok(())
}

/// Empties (or creates) the launch log at `path`. CubeCL opens its log without truncating, so
/// a run writing into the log of an earlier, longer one overwrote it from the start and its
/// line count stood still: every launch of the first workloads went uncounted.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn empty_launch_log(path: &Path) -> Result<(), BackendError> {
    std::fs::File::create(path).map(drop).map_err(|err| {
        BackendError::LaunchCount(format!(
            "cannot write the launch log {}: {err}",
            path.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        if let Err(err) = std::fs::write(path, text) {
            panic!("writing {}: {err}", path.display());
        }
    }

    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    #[test]
    fn an_earlier_runs_launch_log_is_emptied_and_a_folder_refused() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let log = root.path().join("kernel-launches.log");
        write(&log, "Executing A\nExecuting B\n");
        empty_launch_log(&log).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::metadata(&log).map(|m| m.len()).ok(), Some(0));
        let err = empty_launch_log(root.path()).err().map(|e| e.to_string());
        assert!(
            err.as_ref().is_some_and(|e| e.contains("launch log")),
            "{err:?}"
        );
    }

    #[test]
    fn a_file_is_refused_as_the_cache_folder() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let file = root.path().join("a-file");
        write(&file, "not a folder");
        let err = set_cache_dir(&file).err().map(|e| e.to_string());
        assert!(
            err.as_ref()
                .is_some_and(|e| e.ends_with("a-file: not a folder")),
            "{err:?}"
        );
    }

    #[test]
    fn a_cubecl_file_counts_only_when_it_names_a_cache() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let inner = root.path().join("a").join("b");
        std::fs::create_dir_all(&inner).unwrap_or_else(|e| panic!("mkdir: {e}"));
        assert_eq!(cubecl_file_naming_a_cache(&inner), None);

        // A file with other settings only: Quench's folder still applies.
        write(
            &root.path().join("cubecl.toml"),
            "[autotune]\nlevel = \"minimal\"\n",
        );
        assert_eq!(cubecl_file_naming_a_cache(&inner), None);

        write(
            &root.path().join("cubecl.toml"),
            "[autotune]\ncache = { file = \"/x\" }\n",
        );
        assert_eq!(
            cubecl_file_naming_a_cache(&inner),
            Some(root.path().join("cubecl.toml"))
        );

        // burn.toml's section counts too, and the nearer file wins.
        write(
            &inner.join("burn.toml"),
            "[cubecl.compilation]\ncache = \"local\"\n",
        );
        assert_eq!(
            cubecl_file_naming_a_cache(&inner),
            Some(inner.join("burn.toml"))
        );
    }

    #[test]
    fn the_default_folder_follows_xdg_then_home() {
        // Read without changing the process's environment (tests run in parallel): the rule
        // is checked on whatever this machine has.
        let expected = match std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
            Some(xdg) => Some(PathBuf::from(xdg).join("quench").join("cubecl")),
            None => std::env::var_os("HOME").filter(|d| !d.is_empty()).map(|h| {
                PathBuf::from(h)
                    .join(".cache")
                    .join("quench")
                    .join("cubecl")
            }),
        };
        assert_eq!(default_dir(), expected);
    }

    #[test]
    fn entries_count_kernels_and_tuned_shapes_in_the_tables_of_contents() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        assert_eq!(
            entries(&root.path().join("missing")),
            CacheEntries::default()
        );
        // CubeCL's layout on CUDA (seen on an H100): a table of contents beside binary chunks,
        // and autotune tables per device.
        let ptx = root.path().join("cuda").join("0.10.0").join("ptx");
        let tuned = root
            .path()
            .join("autotune")
            .join("0.10.0")
            .join("device-0-0-cuda");
        for dir in [&ptx, &tuned] {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir: {e}"));
        }
        write(
            &ptx.join("toc.json.log"),
            "{\"key\":1}\n{\"key\":2}\n{\"key\":3}\n",
        );
        write(&ptx.join("chunk0.cbor"), "binary\nwith\nnewlines\n");
        write(&tuned.join("matmul.json.log"), "{\"key\":4}\n");
        let found = entries(root.path());
        assert_eq!((found.kernels, found.tuned), (3, 1));
        assert_eq!(found.bytes, 30 + 21 + 10);
    }
}
