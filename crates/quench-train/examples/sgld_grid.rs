//! Runs an SGLD grid from a configuration and prints its per-beta table and wall time.
//!
//! `cargo run --release -p quench-train --example sgld_grid -- configs/sgld/synth-full.toml [--device D] [--original]`
//! runs every chain of the grid as one batched program (Quench's way: counter-based noise,
//! the fused step, finished chains dropped), or with `--original` one chain after another as
//! the original did.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use burn::tensor::backend::AutodiffBackend;
use quench_device::spec::{run_example, take_device_flag};
use quench_device::{OnDevice, run_on, select_announced};
use quench_train::sgld::{Execution, GridConfig, GridData, GridResult, SgldError, run_grid};

struct Grid {
    config: GridConfig,
    execution: Execution,
}

impl OnDevice for Grid {
    type Output = Result<GridResult, SgldError>;

    fn run<B: AutodiffBackend>(self, device: &B::Device) -> Self::Output {
        let data = GridData::load(&self.config)?;
        run_grid::<B>(&self.config, &data, &self.execution, device)
    }
}

fn main() -> ExitCode {
    // Training steps free and reallocate megabytes each step: keep that memory mapped.
    quench_device::allocator::keep_freed_memory();
    let (spec, args) = take_device_flag(std::env::args().skip(1).collect());
    let original = args.iter().any(|a| a == "--original");
    let positional: Vec<&String> = args.iter().filter(|a| *a != "--original").collect();
    let [config_path] = positional[..] else {
        eprintln!("usage: sgld_grid CONFIG.toml [--device auto|cpu|cuda:N] [--original]");
        return ExitCode::from(2);
    };
    run_example(|| {
        let config = GridConfig::load(Path::new(config_path))?;
        let selection = select_announced(&spec)?;
        let execution = if original {
            Execution::ORIGINAL
        } else {
            Execution::BATCHED
        };
        println!(
            "{} chains, {} chain-epochs, loss {:?}, {}",
            config.chains(),
            config.chain_epochs(),
            config.loss,
            if original {
                "one chain at a time (the original's way)"
            } else {
                "batched, fused step"
            }
        );
        let start = Instant::now();
        let result = run_on(selection.device, Grid { config, execution })??;
        print!("{result}");
        println!("wall time {:.1} s", start.elapsed().as_secs_f64());
        Ok(())
    })
}
