//! quench-sgld: batched chains against one chain at a time, with host noise and with the fused
//! step's counter-based noise.

use super::Check;
use quench_kernels::QuenchBackend;
use quench_sgld::{Execution as SgldExecution, GridConfig, GridData, NoiseSource};
use quench_train::settings::Valid;

/// A small SGLD grid (chains of 1, 3 and 12 epochs, host noise) batched with finished chains
/// dropped, against one chain at a time: every chain's final losses and errors.
pub(super) fn sgld_chains<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Check> {
    let config = Valid::new(GridConfig::mixed_lengths())?;
    let data = GridData::load(&config)?;
    let run =
        |execution: SgldExecution| quench_sgld::run_grid::<B>(&config, &data, &execution, device);
    let alone = run(SgldExecution::ORIGINAL)?;
    let batched = run(SgldExecution {
        noise: NoiseSource::Host,
        ..SgldExecution::BATCHED
    })?;
    let error = batched.max_chain_difference(&alone);
    Ok(Check::measured(
        "sgld: batched chains = one chain at a time",
        error,
        1e-5,
    ))
}

/// The same grid with counter-based noise: the fused step of all chains batched (the host
/// kernel on the CPU, hand-derived tensor ops elsewhere) against the autodiff step of each
/// chain alone.
pub(super) fn sgld_fused<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Check> {
    let config = Valid::new(GridConfig::mixed_lengths())?;
    let data = GridData::load(&config)?;
    let run =
        |execution: SgldExecution| quench_sgld::run_grid::<B>(&config, &data, &execution, device);
    let alone = run(SgldExecution {
        noise: NoiseSource::Device,
        ..SgldExecution::ORIGINAL
    })?;
    let fused = run(SgldExecution::BATCHED)?;
    Ok(Check::measured(
        "sgld: fused batched step = autodiff step of each chain alone (counter noise)",
        fused.max_chain_difference(&alone),
        1e-5,
    ))
}
