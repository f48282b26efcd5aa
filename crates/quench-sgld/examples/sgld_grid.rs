//! Runs an SGLD grid from a configuration and prints its per-beta table and wall time.
//!
//! `cargo run --release -p quench-sgld --example sgld_grid -- configs/sgld/synth-full.toml [--device D] [--original] [--chains OUT.json] [--max-hours H]`
//! runs every chain of the grid as one batched program (Quench's way: counter-based noise,
//! the fused step, finished chains dropped), or with `--original` one chain after another as
//! the original did. `--chains` writes every chain's final scores as JSON.
//!
//! Built with `--features mpi` and started by `mpirun -n N` (or `srun`), rank `r` runs its
//! share of the chains (`quench_sgld::shard_chains`: longest first, dealt round-robin),
//! and rank 0 gathers them, prints the table and each rank's time. Each chain gives the same
//! result as in one process: its initialisation, batch order and noise come from its own seed.

quench_support::aligned_allocator!();

use quench_device::select_announced;
use quench_kernels::{OnDevice, QuenchBackend, run_on};
use quench_platform::DeviceSpec;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use quench_platform::spec::{run_example, take_device_flag};
use quench_scale::{Shard, World, local_rank};
use quench_sgld::{
    ChainOutcome, Execution, GridConfig, GridData, GridResult, SgldError, run_grid_shard,
    shard_chains,
};
use quench_train::settings::Valid;
use serde::{Deserialize, Serialize};

struct GridShard<'a> {
    config: &'a Valid<GridConfig>,
    data: &'a GridData,
    execution: Execution,
    shard: Shard,
}

impl OnDevice for GridShard<'_> {
    type Output = Result<Vec<ChainOutcome>, SgldError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        run_grid_shard::<B>(self.config, self.data, &self.execution, self.shard, device)
    }
}

/// What a rank sends to rank 0.
#[derive(Serialize, Deserialize)]
struct RankPart {
    seconds: f64,
    chains: Vec<ChainOutcome>,
}

struct Args {
    config: PathBuf,
    device: DeviceSpec,
    original: bool,
    chains_out: Option<PathBuf>,
}

const USAGE: &str = "usage: sgld_grid CONFIG.toml [--device auto|cpu|cuda:N] [--original] \
                     [--chains OUT.json] [--max-hours H]";

/// The example's arguments once the shared flags are taken (`--help`, `--max-hours`).
fn parse_args(args: Vec<String>) -> Result<Args, String> {
    let (device, args) = take_device_flag(args).map_err(|e| e.to_string())?;
    let mut original = false;
    let mut chains_out = None;
    let mut positional = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--original" => original = true,
            "--chains" => {
                chains_out = Some(PathBuf::from(
                    args.next().ok_or("--chains needs a file name")?,
                ));
            }
            _ => positional.push(arg),
        }
    }
    let [config] = &positional[..] else {
        return Err(quench_support::cli::unexpected_arguments(
            &positional,
            USAGE,
        ));
    };
    Ok(Args {
        config: config.into(),
        device,
        original,
        chains_out,
    })
}

fn main() -> ExitCode {
    // Training steps free and reallocate megabytes each step: keep that memory mapped.
    quench_support::allocator::keep_freed_memory();
    let args = match quench_support::cli::example_flags(std::env::args().skip(1).collect(), USAGE)
        .map(parse_args)
    {
        Ok(Ok(args)) => args,
        Ok(Err(usage)) => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
        Err(code) => return code,
    };
    let world = match World::init() {
        Ok(world) => world,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    run_example(|| run(&args, &world))
}

fn run(args: &Args, world: &World) -> Result<(), Box<dyn std::error::Error>> {
    let shard = world.shard();
    // Rank 0 writes the chains after the whole grid: a place they cannot go is said now, and
    // stops every rank rather than leaving the others waiting.
    if shard.is_root()
        && let Some(path) = &args.chains_out
        && let Err(err) = quench_support::files::check_replaceable(path)
    {
        let message = format!("cannot write {}: {err}", path.display());
        if shard.ranks > 1 {
            world.stop_all(&message);
        }
        return Err(message.into());
    }
    let start = Instant::now();
    let config = GridConfig::load(Path::new(&args.config))?;
    let mine = shard_chains(&config, shard);
    // From here on a failing rank stops them all, naming its chains, rather than leaving the
    // others waiting in the gather.
    let done = (|| -> Result<(GridData, Vec<ChainOutcome>), Box<dyn std::error::Error>> {
        let selection = select_announced(args.device.for_local_rank(local_rank()))?;
        let data = GridData::load(&config)?;
        let execution = if args.original {
            Execution::ORIGINAL
        } else {
            Execution::BATCHED
        };
        if shard.is_root() {
            println!(
                "{} chains, {} chain-epochs, loss {:?}, {}{}",
                config.chains(),
                config.chain_epochs(),
                config.loss,
                if args.original {
                    "one chain at a time (the original's way)"
                } else {
                    "batched, fused step"
                },
                if shard.ranks > 1 {
                    format!(", over {} ranks", shard.ranks)
                } else {
                    String::new()
                }
            );
        }
        let grid = GridShard {
            config: &config,
            data: &data,
            execution,
            shard,
        };
        let outcomes = run_on(selection.device, grid)??;
        Ok((data, outcomes))
    })();
    let (data, outcomes) = match done {
        Ok(done) => done,
        Err(err) if shard.ranks > 1 => world.stop_all(&format!(
            "chains (beta index, repetition) {mine:?} of {}: {err}",
            args.config.display()
        )),
        Err(err) => return Err(err),
    };
    let part = RankPart {
        seconds: start.elapsed().as_secs_f64(),
        chains: outcomes,
    };
    let Some(parts) = world.gather(&serde_json::to_vec(&part)?)? else {
        return Ok(());
    };
    let parts: Vec<RankPart> = parts
        .iter()
        .map(|bytes| serde_json::from_slice(bytes))
        .collect::<Result<_, _>>()?;
    let chains: Vec<ChainOutcome> = parts.iter().flat_map(|p| p.chains.clone()).collect();
    let result = GridResult::new(&config, &data, chains);
    print!("{result}");
    if shard.ranks > 1 {
        for (rank, part) in parts.iter().enumerate() {
            println!(
                "rank {rank}: {} chains in {:.1} s",
                part.chains.len(),
                part.seconds
            );
        }
    }
    if let Some(path) = &args.chains_out {
        let text = serde_json::to_string_pretty(&result.chains)?;
        quench_support::files::write_atomically(path, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    println!("wall time {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}
