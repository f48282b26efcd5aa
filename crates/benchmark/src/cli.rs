//! The `benchmark` command line: parsed by clap, each command run, its outcome an exit status
//! with a one-line error. The binary is this function; the Python package's `python -m quench`
//! is too.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use quench_device::diagnostics::DiagnosticsConfig;
use quench_device::{DeviceError, select_announced};
use quench_platform::DeviceSpec;

use crate::error_line::{joined_lines, one_line};
use crate::workload::RunPrecision;
use crate::{checks, peers, report, run, workloads};

/// Exit status for a device or precision that cannot be used.
const EXIT_DEVICE: u8 = 2;
/// Exit status for a command line that cannot be read (as clap's own).
const EXIT_USAGE: u8 = 2;
/// Exit status when standard output's reader has gone (`benchmark list | head -1`): what a
/// shell reports for a program that SIGPIPE ended, said without a message.
const EXIT_BROKEN_PIPE: u8 = 128 + 13;

/// Standard output could not be written: its reader gone, or a full disk.
#[derive(Debug)]
struct StdoutError(std::io::Error);

impl std::fmt::Display for StdoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write to standard output: {}", self.0)
    }
}

impl std::error::Error for StdoutError {}

/// The exit status for output that could not be written: [`EXIT_BROKEN_PIPE`] and nothing said
/// when the reader has gone, else 1 with the error on standard error.
fn unwritten(failed: &StdoutError) -> u8 {
    if failed.0.kind() == std::io::ErrorKind::BrokenPipe {
        return EXIT_BROKEN_PIPE;
    }
    eprintln!("error: {failed}");
    1
}

/// Writes `text` to standard output, as `print!` does, but returns the error where `print!`
/// panics. Flushed, so that a full disk is found here rather than at exit.
fn out(text: std::fmt::Arguments<'_>) -> Result<(), StdoutError> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_fmt(text)
        .and_then(|()| stdout.flush())
        .map_err(StdoutError)
}

#[derive(Parser, Debug)]
#[command(name = "benchmark", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// `run`'s options, for a run without the word `run`.
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    global: GlobalArgs,
}

/// Options every command takes, before or after its name.
#[derive(Args, Debug, Clone)]
struct GlobalArgs {
    /// auto, cpu, cuda, cuda:N, wgpu or wgpu:N (`benchmark doctor` lists the wgpu adapters).
    #[arg(long, global = true, default_value = "auto")]
    device: DeviceSpec,
    /// The arithmetic of the variants that follow it (`benchmark list` marks them), and of
    /// `verify`'s mixed-precision check: auto (bf16 where the device has it, else none), f32
    /// (no mixed precision), tf32, bf16 or f16.
    #[arg(long, global = true, default_value = "auto")]
    precision: RunPrecision,
    /// Output folder of `run` (report.json, report.md).
    #[arg(long, global = true, default_value = "bench-out")]
    out: PathBuf,
    /// Where GPU runs keep compiled kernels and autotune results between processes (default:
    /// $QUENCH_CACHE_DIR, else a cubecl.toml that names a cache, else
    /// $XDG_CACHE_HOME/quench/cubecl or ~/.cache/quench/cubecl).
    #[arg(long, global = true)]
    cache_dir: Option<PathBuf>,
    /// The longest run one setting may ask for, in hours: a count whose estimate (the count
    /// times a documented lower bound of one unit's cost) exceeds it is refused before any
    /// work, naming the setting [default: 24]
    #[arg(long, global = true, value_name = "HOURS")]
    max_hours: Option<f64>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a suite (the default): time every variant, compare with baselines, write reports.
    Run(RunArgs),
    /// Describe the device and measure its tiny-op latency, matmul throughput and bandwidth.
    Doctor,
    /// List the registered workloads and their variants.
    List,
    /// Run the numerical checks on this machine's device: solvers against the f64 reference,
    /// batched equals one at a time, loader determinism, the mixed-precision policy; exit 1 if
    /// any fails.
    Verify,
    /// Validate a data file (IDX, qRNG bit strings or OHLCV bars) and summarise it; a bad file
    /// exits 1.
    Data {
        /// The file.
        file: PathBuf,
        /// idx, qrng or ohlcv (MetaTrader-5 bars, never detected); idx or qrng is detected from
        /// the content when absent.
        #[arg(long)]
        format: Option<quench_data::Format>,
    },
    /// Run each suite workload's PyTorch peer (`peers/`) at the suite's size, without Quench's
    /// variants, and print what they measured; exit 1 if any did not run.
    Peers(PeersArgs),
    /// Compare two report.json files variant by variant (A is the reference).
    Compare {
        /// The reference report.
        a: PathBuf,
        /// The report compared with it.
        b: PathBuf,
        /// Also check that every variant of A ran in B with a quality within this fraction of
        /// A's (relative, or absolute below 1: 0.05 is "within 5 % or 0.05"); exit 1 where one
        /// does not.
        #[arg(long, value_name = "FRACTION", value_parser = agreement_fraction, allow_negative_numbers = true)]
        agree: Option<f64>,
    },
}

#[derive(Args, Debug, Clone, Default, PartialEq)]
struct SuiteArgs {
    /// The suite file (default: configs/quick.toml).
    #[arg(long)]
    suite: Option<PathBuf>,
    /// Only these workloads (comma separated).
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
}

impl SuiteArgs {
    /// The suite file.
    fn path(&self) -> PathBuf {
        self.suite
            .clone()
            .unwrap_or_else(run::suite::default_suite_path)
    }
}

#[derive(Args, Debug, Clone)]
struct PeersArgs {
    #[command(flatten)]
    suite_args: SuiteArgs,
    #[command(flatten)]
    python: PythonArgs,
}

#[derive(Args, Debug, Clone, PartialEq)]
struct PythonArgs {
    /// The Python that runs the PyTorch peers (default: $QUENCH_PYTHON, then python3, then
    /// python; the first that imports torch).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Seconds one PyTorch peer may run before it is stopped and recorded as failed (the run
    /// goes on); 1 to 604800 (a week).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = peers::DEFAULT_PEER_TIMEOUT.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=peers::MAX_PEER_TIMEOUT_S),
    )]
    peer_timeout: u64,
}

impl Default for PythonArgs {
    /// As clap fills it when neither option is given (so that `RunArgs::default()` means "no
    /// option of `run` given").
    fn default() -> Self {
        Self {
            python: None,
            peer_timeout: peers::DEFAULT_PEER_TIMEOUT.as_secs(),
        }
    }
}

#[derive(Args, Debug, Clone, Default, PartialEq)]
struct RunArgs {
    #[command(flatten)]
    suite_args: SuiteArgs,
    /// Timed repeats of every variant (overrides the suite's `[timing] repeats` and a
    /// workload's own `repeats`).
    #[arg(long)]
    repeats: Option<usize>,
    /// Only the variants of these names (comma separated), of those the suite selects in each
    /// workload, e.g. `all` for the product's own path without the baselines.
    #[arg(long, value_delimiter = ',')]
    variants: Option<Vec<String>>,
    /// Also run each workload's PyTorch peer (`peers/`) on the same device and add its row and
    /// every variant's ratio against it; without a Python with torch the run says so and goes
    /// on.
    #[arg(long)]
    peers: bool,
    #[command(flatten)]
    python: PythonArgs,
    /// Count kernel launches and host read-backs per iteration of every variant on a CubeCL
    /// device (wgpu, CUDA), from CubeCL's launch log in the output folder
    /// (kernel-launches.log); the log costs time, so such a run's times are not the device's
    /// best.
    #[arg(long)]
    count_launches: bool,
    /// With --count-launches, also count the kernels this process compiles (CubeCL's
    /// compilation log, in the same file): what a cold start compiles. On wgpu CubeCL then
    /// runs its instance with debugging and validation (Vulkan's validation layers where
    /// installed), about twice as slow on lavapipe.
    #[arg(long, requires = "count_launches")]
    count_compilations: bool,
    /// Print every column of report.md in the terminal table (time range, per run,
    /// throughput, peak memory; over 100 columns wide) instead of the compact one.
    #[arg(long)]
    wide: bool,
}

/// A command line clap could not read: `--help` and `--version` as clap prints them, anything
/// else as one line (clap's message, which names the argument) with where help is, exit
/// [`EXIT_USAGE`]. Clap's own report adds the usage and a tip on lines of their own, which a
/// log or a batch system's error file cuts from the line that says what was wrong.
fn usage_error(err: &clap::Error) -> u8 {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let status = u8::try_from(err.exit_code()).unwrap_or(EXIT_USAGE);
        if err.use_stderr() {
            // The help shown for a missing command, on standard error: nowhere to say more
            // if that cannot be written.
            let _ = err.print();
            return status;
        }
        // The help and the version, on standard output as the commands' output.
        return match out(format_args!("{}", err.render())) {
            Ok(()) => status,
            Err(failed) => unwritten(&failed),
        };
    }
    // Clap's message ends at its first blank line (the usage follows); some messages list
    // the arguments on lines of their own (`the following required arguments were not
    // provided:` then `<B>`): joined, so the line still names them.
    let rendered = err.render().to_string();
    let message = joined_lines(rendered.split("\n\n").next().unwrap_or_default());
    eprintln!("{message} (see `benchmark --help`)");
    EXIT_USAGE
}

/// Runs the command line `args` (the program's name first, as `std::env::args_os` gives it)
/// and returns the process's exit status: 0, 1 for a failed command (its error printed on one
/// line), 2 for a command line that cannot be read or a device that cannot be used, 141 when
/// standard output's reader has gone.
pub fn main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    // Training steps free and reallocate megabytes each step: keep that memory mapped.
    quench_support::allocator::keep_freed_memory();
    // A second call in one process (Python's `quench.cli`) finds the logger already set.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // CubeCL logs a warning from its device thread when a probe of an absent GPU
                // panics there; the probe turns that panic into Quench's own one-line note.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new(
                        "warn,cubecl_common::device::handle::channel::task=error",
                    )
                }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    if let Some(command) = &cli.command
        && cli.run != RunArgs::default()
    {
        eprintln!(
            "error: options of `run` (--suite, --only, --repeats, --variants, --peers, --python, \
             --count-launches, --count-compilations, --wide) were given before the command \
             `{}`: put them after `run`, or leave the command out",
            command.name()
        );
        return EXIT_USAGE;
    }
    let global = &cli.global;
    if let Some(hours) = global.max_hours
        && let Err(err) = quench_support::budget::set_max_hours(hours)
    {
        eprintln!("error: --max-hours: {err}");
        return EXIT_USAGE;
    }
    if let Some(dir) = &global.cache_dir
        && let Err(err) = quench_platform::kernel_cache::set_cache_dir(dir)
    {
        eprintln!("error: {err}");
        return 1;
    }
    let outcome = match &cli.command {
        Some(Command::Run(args)) => run(args, global),
        None => run(&cli.run, global),
        Some(Command::Doctor) => doctor(global),
        Some(Command::Verify) => verify(global),
        Some(Command::List) => list(),
        Some(Command::Data { file, format }) => data(file, *format),
        Some(Command::Peers(args)) => run_peers(args, global),
        Some(Command::Compare { a, b, agree }) => compare(a, b, *agree),
    };
    match outcome {
        Ok(()) => 0,
        Err(ref err) if let Some(failed) = err.downcast_ref::<StdoutError>() => unwritten(failed),
        Err(err) => {
            let status = if err
                .downcast_ref::<DeviceError>()
                .is_some_and(DeviceError::is_unusable_device)
            {
                EXIT_DEVICE
            } else {
                1
            };
            eprintln!("error: {}", one_line(&err));
            status
        }
    }
}

impl Command {
    /// The command's name on the command line.
    fn name(&self) -> &'static str {
        match self {
            Self::Run(_) => "run",
            Self::Doctor => "doctor",
            Self::List => "list",
            Self::Verify => "verify",
            Self::Data { .. } => "data",
            Self::Peers(_) => "peers",
            Self::Compare { .. } => "compare",
        }
    }
}

/// `benchmark data FILE [--format F]`.
fn data(file: &Path, format: Option<quench_data::Format>) -> anyhow::Result<()> {
    // Text is guessed to be bit strings; a refusal then says so, and how to read market bars.
    let (format, guessed) = match format {
        Some(format) => (format, false),
        None => (quench_data::Format::detect(file)?, true),
    };
    let summary = quench_data::summary(file, Some(format)).map_err(anyhow::Error::from);
    let summary = if guessed && matches!(format, quench_data::Format::Qrng) {
        summary.context(
            "read as qRNG bit strings, the format guessed from its text (`--format ohlcv` reads \
             market bars, `--format idx` IDX arrays)",
        )
    } else {
        summary
    }?;
    Ok(out(format_args!("{summary}\n"))?)
}

/// `benchmark compare A B [--agree F]`.
fn compare(a: &Path, b: &Path, agree: Option<f64>) -> anyhow::Result<()> {
    let a_report = report::Report::read(a)?;
    let b_report = report::Report::read(b)?;
    let table = report::compare::compare(&a_report, &b_report);
    let Some(within) = agree else {
        return Ok(out(format_args!("{table}"))?);
    };
    let found = report::compare::disagreements(&a_report, &b_report, within);
    let within = quench_support::numbers::short(within);
    if found.is_empty() {
        return Ok(out(format_args!(
            "{table}\nagree: every variant of A ran in B within {within} of its quality\n"
        ))?);
    }
    let lines: String = found.iter().map(|l| format!("disagree: {l}\n")).collect();
    // The verdict whether or not the table could be printed.
    let _ = out(format_args!("{table}{lines}"));
    // A count of the lines above: a variant that failed in both reports is one line for each.
    anyhow::bail!(
        "{} disagreement(s) of {} with {} (within {within})",
        found.len(),
        b.display(),
        a.display()
    )
}

/// `--agree`'s fraction: finite and not negative.
fn agreement_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("`{text}` is not a fraction >= 0 (0.05 is 5 %)")),
    }
}

fn run(args: &RunArgs, global: &GlobalArgs) -> anyhow::Result<()> {
    let world = quench_scale::World::init()?;
    let shard = world.shard();
    let outcome = run_ranked(args, global, &world);
    match outcome {
        // The other ranks may be waiting for this one in a collective: stop them all.
        Err(err) if shard.ranks > 1 => world.stop_all(&one_line(&err)),
        other => other,
    }
}

/// `benchmark run` as one rank of `world` (the only one, outside an MPI launch): every rank
/// measures; rank 0 writes the reports and prints.
fn run_ranked(
    args: &RunArgs,
    global: &GlobalArgs,
    world: &quench_scale::World,
) -> anyhow::Result<()> {
    let root = world.shard().is_root();
    let folder = &global.out;
    if args.count_launches {
        // CubeCL reads its configuration once, when a device is first used: before selecting.
        let shard = world.shard();
        let log = if shard.ranks > 1 {
            format!("kernel-launches.rank{}.log", shard.rank)
        } else {
            "kernel-launches.log".into()
        };
        std::fs::create_dir_all(folder)
            .with_context(|| format!("creating the output folder {}", folder.display()))?;
        quench_device::counters::log_launches(&folder.join(log), args.count_compilations)?;
    }
    let selection = select_announced(global.device.for_local_rank(quench_scale::local_rank()))?;
    if args.count_launches && selection.device == quench_kernels::SelectedDevice::Cpu {
        return Err(quench_platform::BackendError::LaunchCount(
            "the CPU backend launches no kernels; count them on --device wgpu or cuda".into(),
        )
        .into());
    }
    let precision = global.precision.check_on(selection.device)?;
    let suite_path = args.suite_args.path();
    let output = root.then(|| run::output::Output::new(folder)).transpose()?;
    if let Some(output) = &output {
        output.keep_on_interrupt()?;
    }
    let report = run::run_suite(
        &run::RunRequest {
            suite_path: &suite_path,
            only: args.suite_args.only.clone(),
            variants: args.variants.clone(),
            selection,
            precision,
            repeats: args.repeats,
            peers: (args.peers && root).then(|| announced_python(&args.python)),
            peer_inputs: folder.join("peer-inputs"),
            world,
        },
        &mut |report| output.as_ref().map_or(Ok(()), |o| o.keep(report)),
    );
    let report = match report {
        Ok(report) => report,
        Err(err) => {
            // Refused before any report was written (a bad suite, nothing to run): leave no
            // empty folder behind.
            if let Some(output) = output {
                output.remove_if_unused();
            }
            return Err(err);
        }
    };
    let Some(output) = output else {
        return Ok(());
    };
    output.keep(&report)?;
    let table = if args.wide {
        report.wide_table()
    } else {
        report.table()
    };
    // Each is distinct; a warm kernel cache compiles none of those it holds.
    let compiled = args
        .count_compilations
        .then(quench_device::counters::compilations)
        .flatten()
        .map_or(String::new(), |n| {
            format!("\nkernels compiled by this process: {n}\n")
        });
    let printed = out(format_args!(
        "{table}{compiled}\nreports: {} and {}\n",
        folder.join("report.json").display(),
        folder.join("report.md").display()
    ));
    // The verdict first: failed variants are the run's outcome whether or not its table
    // could be printed.
    let failures = report.failures();
    if !failures.is_empty() {
        anyhow::bail!(
            "{} variant(s) failed; the report records them: {}",
            failures.len(),
            failures.join("; ")
        );
    }
    Ok(printed?)
}

fn verify(global: &GlobalArgs) -> anyhow::Result<()> {
    let selection = select_announced(global.device)?;
    let precision = global.precision.check_on(selection.device)?;
    out(format_args!(
        "verify on {} (--precision {})\n",
        selection.device,
        precision.asked()
    ))?;
    // Each check is printed as it ends, with the seconds since the start: on a cold GPU most
    // of them are compiling kernels, and a run stopped at a time limit still says how far it got.
    // The checks go on when standard output fails: their verdict comes first, then the first
    // failure to print.
    let start = std::time::Instant::now();
    let mut unprinted = Ok(());
    let checks = checks::verify::verify(selection.device, &precision, &mut |check| {
        let printed = out(format_args!(
            "{check}  [{:.1} s]\n",
            start.elapsed().as_secs_f64()
        ));
        // The first failure is kept.
        if unprinted.is_ok() {
            unprinted = printed;
        }
    })?;
    let failed = checks.iter().filter(|c| c.failed()).count();
    if failed > 0 {
        anyhow::bail!("{failed} of {} checks failed", checks.len());
    }
    unprinted?;
    out(format_args!(
        "all {} checks passed or were skipped with a reason\n",
        checks.len()
    ))?;
    Ok(())
}

fn doctor(global: &GlobalArgs) -> anyhow::Result<()> {
    let selection = select_announced(global.device)?;
    let text = checks::doctor::doctor(&selection, DiagnosticsConfig::default())?.text;
    Ok(out(format_args!("{text}"))?)
}

fn list() -> anyhow::Result<()> {
    for workload in workloads::registry() {
        out(format_args!(
            "{}  {}\n",
            workload.name(),
            workload.summary()
        ))?;
        for v in workload.variants() {
            let tag = if v.baseline { " (baseline)" } else { "" };
            let follows = if v.precision.follows_run() {
                "  [follows --precision]"
            } else {
                ""
            };
            let claim = v
                .claim
                .map(|c| {
                    format!(
                        "  [claimed {}-{}x]",
                        crate::numbers::significant(c.low),
                        crate::numbers::significant(c.high)
                    )
                })
                .unwrap_or_default();
            out(format_args!(
                "    {}{tag}  {}{claim}{follows}\n",
                v.name, v.description
            ))?;
        }
    }
    Ok(())
}

/// The Python for the peers, said on stderr: which one, or why none and how to get one.
fn announced_python(args: &PythonArgs) -> Result<peers::Python, String> {
    let found = peers::find_python(
        args.python.as_deref(),
        std::time::Duration::from_secs(args.peer_timeout),
    );
    match &found {
        Ok(python) => eprintln!(
            "PyTorch peers: {} (torch {})",
            python.path.display(),
            python.torch
        ),
        Err(why) => eprintln!("PyTorch peers not run: {why}"),
    }
    found
}

/// `benchmark peers`: every suite workload's peer, one line each.
fn run_peers(args: &PeersArgs, global: &GlobalArgs) -> anyhow::Result<()> {
    let selection = select_announced(global.device)?;
    let device = peers::peer_device(selection.device);
    let suite_path = args.suite_args.path();
    let suite = run::suite::Suite::load(&suite_path)?;
    let python = announced_python(&args.python);
    let workloads = workloads::registry();
    let planned = run::plan(
        &suite,
        &suite_path,
        args.suite_args.only.as_deref(),
        None,
        &workloads,
    )?;
    // The files peers read (windows, tasks) live as long as this command.
    let inputs = tempfile::tempdir().context("cannot create a folder for the peers' inputs")?;
    let mut not_run = 0;
    let total = planned.len();
    for (workload, prepared, _) in planned {
        let found = python.as_ref().map_err(String::as_str);
        let peer = || prepared.peer(&inputs.path().join(workload.name()));
        match peers::measure(found, peer, &device, suite.timing) {
            Ok(p) => out(format_args!(
                "{}/pytorch [torch {}, {}]  {} /{}  {} {}\n",
                workload.name(),
                p.torch,
                p.device,
                crate::numbers::seconds(p.per_iteration_s),
                p.iteration_unit,
                p.quality_metric,
                crate::numbers::significant(p.quality)
            ))?,
            // A workload without a peer is no failure of this command; a peer that did not run is.
            Err(why) => {
                not_run += usize::from(why != peers::NoFigure::NoPeer);
                out(format_args!("{}/pytorch not run: {why}\n", workload.name()))?
            }
        }
    }
    // Running the peers is all this command does: one that did not run is a failure.
    anyhow::ensure!(
        not_run == 0,
        "{not_run} PyTorch peer(s) of the {total} workload(s) not run (the reasons above)"
    );
    Ok(())
}
