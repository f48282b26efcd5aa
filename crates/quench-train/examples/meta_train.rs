//! Trains a meta-policy from a configuration and writes its history and policy.
//!
//! `cargo run --release -p quench-train --example meta_train -- configs/lindblad/exact.toml [OUT_DIR] [--device D]`
//! prints one line per validation, and writes `OUT_DIR/history.json` and `OUT_DIR/policy.mpk`
//! (default `OUT_DIR`: `meta-out`).

use std::path::PathBuf;
use std::process::ExitCode;

use burn::tensor::backend::AutodiffBackend;
use quench_device::spec::{run_example, take_device_flag};
use quench_device::{OnDevice, run_on, select_announced};
use quench_lindblad::OperatorCache;
use quench_train::meta::{MetaConfig, MetaError, MetaRun, save_policy};

struct Train {
    config: MetaConfig,
    out: PathBuf,
}

impl OnDevice for Train {
    type Output = Result<(), MetaError>;

    fn run<B: AutodiffBackend>(self, device: &B::Device) -> Self::Output {
        let mut cache = OperatorCache::<B>::new();
        let mut run = MetaRun::<B>::new(&self.config, &mut cache, device)?;
        let history = run.train(|record, validation| {
            if let Some(v) = validation {
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
        history.write_json(&self.out.join("history.json"))?;
        save_policy(&run.learner.policy, &self.out.join("policy"))?;
        println!("wrote {}/history.json and policy.mpk", self.out.display());
        Ok(())
    }
}

fn main() -> ExitCode {
    // Training steps free and reallocate megabytes each step: keep that memory mapped.
    quench_device::allocator::keep_freed_memory();
    let (spec, positional) = take_device_flag(std::env::args().skip(1).collect());
    let Some(config_path) = positional.first() else {
        eprintln!("usage: meta_train CONFIG.toml [OUT_DIR] [--device auto|cpu|cuda:N]");
        return ExitCode::from(2);
    };
    let out = PathBuf::from(positional.get(1).map_or("meta-out", |s| s.as_str()));
    run_example(|| {
        let config: MetaConfig =
            quench_device::load_toml(std::path::Path::new(config_path.as_str()))?;
        let selection = select_announced(&spec)?;
        std::fs::create_dir_all(&out)?;
        run_on(selection.device, Train { config, out })??;
        Ok(())
    })
}
