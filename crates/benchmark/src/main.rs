//! The Quench benchmark: runs suites of workloads and prints claimed against measured speed-ups,
//! with the quality metric checked beside the speed.

mod compare;
mod doctor;
mod npy;
mod output;
mod peers;
mod plots;
mod ranks;
mod render;
mod report;
mod run;
mod suite;
mod verify;
mod workload;
mod workloads;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use quench_device::diagnostics::DiagnosticsConfig;
use quench_device::{DeviceError, select_announced};

/// Exit status for a device or precision that cannot be used.
const EXIT_DEVICE: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "benchmark",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a suite (the default): time every variant, compare with baselines, write reports.
    Run(RunArgs),
    /// Describe the device and measure its tiny-op latency, matmul throughput and bandwidth.
    Doctor(DeviceArgs),
    /// List the registered workloads and their variants.
    List,
    /// Run the numerical checks on this machine's device: solvers against the f64 reference,
    /// batched equals one at a time, loader determinism, the mixed-precision policy; exit 1 if
    /// any fails.
    Verify(VerifyArgs),
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
    /// variants, and print what they measured.
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
        #[arg(long, value_name = "FRACTION", value_parser = agreement_fraction)]
        agree: Option<f64>,
    },
}

#[derive(Args, Debug, Clone)]
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
        self.suite.clone().unwrap_or_else(suite::default_suite_path)
    }
}

#[derive(Args, Debug, Clone)]
struct PeersArgs {
    #[command(flatten)]
    suite_args: SuiteArgs,
    #[command(flatten)]
    device: DeviceArgs,
    #[command(flatten)]
    python: PythonArgs,
}

#[derive(Args, Debug, Clone)]
struct PythonArgs {
    /// The Python that runs the PyTorch peers (default: $QUENCH_PYTHON, then python3, then
    /// python; the first that imports torch).
    #[arg(long)]
    python: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct DeviceArgs {
    /// auto, cpu, cuda, cuda:N, wgpu or wgpu:N (`benchmark doctor` lists the wgpu adapters).
    #[arg(long, default_value = "auto")]
    device: String,
}

#[derive(Args, Debug, Clone)]
struct VerifyArgs {
    #[command(flatten)]
    device: DeviceArgs,
    /// The precision of the mixed-precision checks: auto, f32 (none), tf32, bf16 or f16.
    #[arg(long, default_value = "auto")]
    precision: String,
}

#[derive(Args, Debug, Clone)]
struct RunArgs {
    #[command(flatten)]
    suite_args: SuiteArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// The arithmetic of the variants that follow it (`benchmark list` marks them): auto (bf16
    /// where the device has it, else none), f32 (no mixed precision), tf32, bf16 or f16.
    #[arg(long, default_value = "auto")]
    precision: String,
    /// Timed repeats of every variant (overrides the suite).
    #[arg(long)]
    repeats: Option<usize>,
    /// Output folder for report.json and report.md.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Also run each workload's PyTorch peer (`peers/`) on the same device and add its row and
    /// every variant's ratio against it; without a Python with torch the run says so and goes
    /// on.
    #[arg(long)]
    peers: bool,
    #[command(flatten)]
    python: PythonArgs,
    /// Count kernel launches and host read-backs per iteration of every variant, on a CubeCL
    /// device (wgpu, CUDA), from CubeCL's launch log in the output folder
    /// (kernel-launches.log); the log costs time, so such a run's times are not the device's
    /// best.
    #[arg(long)]
    count_launches: bool,
}

fn main() -> ExitCode {
    // Training steps free and reallocate megabytes each step: keep that memory mapped.
    quench_device::allocator::keep_freed_memory();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Some(Command::Run(args)) => run(&args),
        None => run(&cli.run),
        Some(Command::Doctor(args)) => doctor(&args),
        Some(Command::Verify(args)) => verify(&args),
        Some(Command::List) => {
            list();
            Ok(())
        }
        Some(Command::Data { file, format }) => quench_data::summary(&file, format)
            .map(|summary| println!("{summary}"))
            .map_err(anyhow::Error::from),
        Some(Command::Peers(args)) => run_peers(&args),
        Some(Command::Compare { a, b, agree }) => report::Report::read(&a)
            .and_then(|a_report| Ok((a_report, report::Report::read(&b)?)))
            .and_then(|(a_report, b_report)| {
                print!("{}", compare::compare(&a_report, &b_report));
                let Some(within) = agree else { return Ok(()) };
                let found = compare::disagreements(&a_report, &b_report, within);
                if found.is_empty() {
                    println!("\nagree: every variant of A ran in B within {within} of its quality");
                    return Ok(());
                }
                for line in &found {
                    println!("disagree: {line}");
                }
                anyhow::bail!(
                    "{} variant(s) of {} disagree with {} (within {within})",
                    found.len(),
                    b.display(),
                    a.display()
                )
            }),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let status = if err.downcast_ref::<DeviceError>().is_some() {
                EXIT_DEVICE
            } else {
                1
            };
            eprintln!("error: {}", one_line(&err));
            ExitCode::from(status)
        }
    }
}

/// `--agree`'s fraction: finite and not negative.
fn agreement_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("`{text}` is not a fraction >= 0 (0.05 is 5 %)")),
    }
}

/// The error and its causes on one line, leaving out a cause that its parent's message
/// already quotes (library errors often print their source themselves).
fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !parts
            .last()
            .is_some_and(|previous| previous.contains(&text))
        {
            parts.push(text);
        }
    }
    parts.join(": ")
}

fn run(args: &RunArgs) -> anyhow::Result<()> {
    let world = quench_scale::World::init()?;
    let shard = world.shard();
    let outcome = run_ranked(args, &world);
    match outcome {
        // The other ranks may be waiting for this one in a collective: stop them all.
        Err(err) if shard.ranks > 1 => world.stop_all(&one_line(&err)),
        other => other,
    }
}

/// `benchmark run` as one rank of `world` (the only one, outside an MPI launch): every rank
/// measures; rank 0 writes the reports and prints.
fn run_ranked(args: &RunArgs, world: &quench_scale::World) -> anyhow::Result<()> {
    let root = world.shard().is_root();
    let precision: workload::RunPrecision = args.precision.parse()?;
    if args.count_launches {
        // CubeCL reads its configuration once, when a device is first used: before selecting.
        let shard = world.shard();
        let log = if shard.ranks > 1 {
            format!("kernel-launches.rank{}.log", shard.rank)
        } else {
            "kernel-launches.log".into()
        };
        std::fs::create_dir_all(&args.out)
            .with_context(|| format!("creating the output folder {}", args.out.display()))?;
        quench_device::counters::log_launches(&args.out.join(log))?;
    }
    let selection = select_announced(&quench_scale::rank_device(&args.device.device))?;
    if args.count_launches && selection.device == quench_device::SelectedDevice::Cpu {
        return Err(DeviceError::LaunchCount(
            "the CPU backend launches no kernels; count them on --device wgpu or cuda".into(),
        )
        .into());
    }
    run::check_precision(&selection, precision)?;
    let suite_path = args.suite_args.path();
    let output = root.then(|| output::Output::new(&args.out)).transpose()?;
    if let Some(output) = &output {
        output.keep_on_interrupt()?;
    }
    let report = run::run_suite(
        &run::RunRequest {
            suite_path: &suite_path,
            only: args.suite_args.only.clone(),
            selection,
            precision,
            repeats: args.repeats,
            peers: (args.peers && root).then(|| announced_python(&args.python)),
            peer_inputs: args.out.join("peer-inputs"),
            world,
        },
        &mut |report| output.as_ref().map_or(Ok(()), |o| o.keep(report)),
    )?;
    let Some(output) = output else {
        return Ok(());
    };
    output.keep(&report)?;
    print!("{}", report.table());
    println!(
        "\nreports: {} and {}",
        args.out.join("report.json").display(),
        args.out.join("report.md").display()
    );
    let failures = report.failures();
    if !failures.is_empty() {
        anyhow::bail!(
            "{} variant(s) failed; the report records them: {}",
            failures.len(),
            failures.join("; ")
        );
    }
    Ok(())
}

fn verify(args: &VerifyArgs) -> anyhow::Result<()> {
    let precision: workload::RunPrecision = args.precision.parse()?;
    let selection = select_announced(&args.device.device)?;
    run::check_precision(&selection, precision)?;
    println!("verify on {} (--precision {precision})", selection.device);
    let checks = verify::verify(selection.device, precision)?;
    for check in &checks {
        println!("{check}");
    }
    let failed = checks.iter().filter(|c| c.failed()).count();
    if failed > 0 {
        anyhow::bail!("{failed} of {} checks failed", checks.len());
    }
    println!(
        "all {} checks passed or were skipped with a reason",
        checks.len()
    );
    Ok(())
}

fn doctor(args: &DeviceArgs) -> anyhow::Result<()> {
    let selection = select_announced(&args.device)?;
    print!(
        "{}",
        doctor::doctor(&selection, DiagnosticsConfig::default())?
    );
    Ok(())
}

fn list() {
    for workload in workloads::registry() {
        println!("{}  {}", workload.name(), workload.summary());
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
                        render::significant(c.low),
                        render::significant(c.high)
                    )
                })
                .unwrap_or_default();
            println!("    {}{tag}  {}{claim}{follows}", v.name, v.description);
        }
    }
}

/// The Python for the peers, said on stderr: which one, or why none and how to get one.
fn announced_python(args: &PythonArgs) -> Result<peers::Python, String> {
    let found = peers::find_python(args.python.as_deref());
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
fn run_peers(args: &PeersArgs) -> anyhow::Result<()> {
    let selection = select_announced(&args.device.device)?;
    let device = peers::peer_device(&selection.device.to_string());
    let suite_path = args.suite_args.path();
    let suite = suite::Suite::load(&suite_path)?;
    let python = announced_python(&args.python);
    let workloads = workloads::registry();
    let planned = run::plan(
        &suite,
        &suite_path,
        args.suite_args.only.as_deref(),
        &workloads,
    )?;
    // The files peers read (windows, tasks) live as long as this command.
    let inputs = tempfile::tempdir().context("cannot create a folder for the peers' inputs")?;
    for (workload, _, params) in planned {
        let found = python.as_ref().map_err(String::as_str);
        let peer = || workload.peer(&params, &inputs.path().join(workload.name()));
        match peers::measure(found, peer, &device, suite.timing) {
            Ok(p) => println!(
                "{}/pytorch [torch {}, {}]  {} /{}  {} {}",
                workload.name(),
                p.torch,
                p.device,
                render::seconds(p.per_iteration_s),
                p.iteration_unit,
                p.quality_metric,
                render::significant(p.quality)
            ),
            Err(why) => println!("{}/pytorch not run: {why}", workload.name()),
        }
    }
    Ok(())
}
