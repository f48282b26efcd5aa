//! Trains a meta-policy from a configuration and writes its history and policy.
//!
//! `cargo run --release -p quench-meta --example meta_train -- configs/lindblad/exact.toml [OUT_DIR] [--device D] [--max-hours H]`
//! prints one line per validation, and writes `OUT_DIR/history.json` and `OUT_DIR/policy.mpk`
//! (default `OUT_DIR`: `meta-out`).
//!
//! Built with `--features mpi` and started by `mpirun -n N` (or `srun`), the training is
//! data-parallel: each rank adapts `tasks_per_batch` tasks of a meta-batch of `N x
//! tasks_per_batch`, the meta-gradient is averaged with one all-reduce, every rank takes the
//! same step, and rank 0 prints and writes. The time the all-reduce took is reported.

quench_support::aligned_allocator!();

use quench_device::select_announced;
use quench_kernels::{OnDevice, QuenchBackend, run_on};
use std::path::PathBuf;
use std::process::ExitCode;

use quench_lindblad::OperatorCache;
use quench_meta::{MetaConfig, MetaError, MetaRun, save_policy};
use quench_platform::spec::{run_example, take_device_flag};
use quench_scale::{World, local_rank};
use quench_train::settings::Valid;

struct Train<'a> {
    config: Valid<MetaConfig>,
    out: PathBuf,
    world: &'a World,
}

impl OnDevice for Train<'_> {
    type Output = Result<(), MetaError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        let shard = self.world.shard();
        let mut cache = OperatorCache::<B>::new();
        let mut run = MetaRun::<B>::new(&self.config, &mut cache, device)?;
        let history = run.train_in(self.world, |record, validation| {
            if let (Some(v), true) = (validation, shard.is_root()) {
                println!(
                    "iter {:>5}  {:>7.2} ms/iter  loss {:.4} -> {:.4}  val fidelity (squared overlap) {:.4} -> {:.4} +- {:.4}",
                    record.iteration,
                    record.seconds * 1e3,
                    record.stats.loss_before,
                    record.stats.loss_after,
                    v.before.squared_overlap.mean,
                    v.after.squared_overlap.mean,
                    v.after.squared_overlap.std
                );
            }
        })?;
        if !shard.is_root() {
            return Ok(());
        }
        if shard.ranks > 1 {
            let iterations = history.iterations.len().max(1) as f64;
            let total: f64 = history.iterations.iter().map(|r| r.seconds).sum();
            let sum = |f: fn(&quench_meta::StepStats) -> f64| -> f64 {
                history.iterations.iter().map(|r| f(&r.stats)).sum()
            };
            let (reduce, wait) = (sum(|s| s.reduce_seconds), sum(|s| s.wait_seconds));
            let share = |s: f64| 100.0 * s / total.max(f64::MIN_POSITIVE);
            println!(
                "{} ranks x {} tasks: {:.2} ms per meta-iteration; all-reduce {:.3} ms ({:.2} %), \
                 waiting for the slowest rank {:.3} ms ({:.2} %)",
                shard.ranks,
                self.config.tasks_per_batch,
                total / iterations * 1e3,
                reduce / iterations * 1e3,
                share(reduce),
                wait / iterations * 1e3,
                share(wait)
            );
        }
        history.write_json(&self.out.join("history.json"))?;
        save_policy(&run.learner.policy, &self.out.join("policy"))?;
        println!("wrote {}/history.json and policy.mpk", self.out.display());
        Ok(())
    }
}

fn main() -> ExitCode {
    // Training steps free and reallocate megabytes each step: keep that memory mapped.
    quench_support::allocator::keep_freed_memory();
    const USAGE: &str =
        "usage: meta_train CONFIG.toml [OUT_DIR] [--device auto|cpu|cuda:N] [--max-hours H]";
    let args = match quench_support::cli::example_flags(std::env::args().skip(1).collect(), USAGE) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let (spec, positional) = match take_device_flag(args) {
        Ok(taken) => taken,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    let (Some(config_path), None) = (positional.first(), positional.get(2)) else {
        eprintln!(
            "{}",
            quench_support::cli::unexpected_arguments(&positional, USAGE)
        );
        return ExitCode::from(2);
    };
    let out = PathBuf::from(positional.get(1).map_or("meta-out", |s| s.as_str()));
    let world = match World::init() {
        Ok(world) => world,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    run_example(|| {
        let shard = world.shard();
        let trained = (|| -> Result<(), Box<dyn std::error::Error>> {
            let config: MetaConfig =
                quench_support::load_toml(std::path::Path::new(config_path.as_str()))?;
            // Checked before the device is chosen: a bad setting costs no start-up.
            let config = Valid::new(config)?;
            let selection = select_announced(spec.for_local_rank(local_rank()))?;
            // Made before training, so that an unwritable place is refused before the work;
            // taken away again if the run ends without writing into it.
            let created = shard.is_root() && !out.exists();
            if shard.is_root() {
                std::fs::create_dir_all(&out).map_err(|e| {
                    format!("{}: cannot make the output folder: {e}", out.display())
                })?;
            }
            let train = Train {
                config,
                out: out.clone(),
                world: &world,
            };
            let trained = run_on(selection.device, train);
            if created && !matches!(trained, Ok(Ok(()))) {
                // Only an empty folder goes (remove_dir refuses any other).
                let _ = std::fs::remove_dir(&out);
            }
            trained??;
            Ok(())
        })();
        match trained {
            Err(err) if shard.ranks > 1 => world.stop_all(&format!(
                "its tasks (block {} of every meta-batch) of {config_path}: {err}",
                shard.rank
            )),
            other => other,
        }
    })
}
