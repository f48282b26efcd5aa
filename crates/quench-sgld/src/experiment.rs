//! The grid as one batched program of every `(beta, repetition)` chain, or, as the original
//! ran it, one chain after another.

use quench_device::Precision;
use quench_kernels::QuenchBackend;
use quench_kernels::views::ReshapeTo;
use std::cmp::Reverse;

use burn::tensor::Tensor;
use quench_data::{Loader, LoaderConfig, Mode};
use quench_scale::Shard;
use quench_train::settings::Valid;

use super::chains::evaluate;
use super::{
    BoundedLoss, ChainBatch, ChainOutcome, ChainSchedule, GridConfig, GridData, GridResult, Noise,
    NoiseSource, Sgld, SgldError, StepOptions,
};

/// How the chains of a grid are run; the benchmark's variants are choices of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// All chains in one batched program; else one chain after another.
    pub batched: bool,
    /// Where the Langevin noise is drawn.
    pub noise: NoiseSource,
    /// Data uploaded once and every batch gathered on the device; else each batch is
    /// assembled on the host and uploaded.
    pub resident_data: bool,
    /// Finished chains leave the batched program; else they stay in it, masked, until the
    /// longest chain ends.
    pub compact: bool,
    /// The step with hand-derived gradients and the update fused in (f32 only); else an
    /// autodiff graph per step.
    pub fused_step: bool,
    /// Arithmetic of the forward pass.
    pub precision: Precision,
}

impl Execution {
    /// The original's way: one chain at a time, noise drawn on the host and copied, batches
    /// assembled on the host, f32.
    pub const ORIGINAL: Self = Self {
        batched: false,
        noise: NoiseSource::Host,
        resident_data: false,
        compact: false,
        fused_step: false,
        precision: Precision::F32,
    };

    /// Quench's way: every chain in one program, counter-based noise drawn where the step
    /// runs, data resident, finished chains dropped, the fused step, f32.
    pub const BATCHED: Self = Self {
        batched: true,
        noise: NoiseSource::Device,
        resident_data: true,
        compact: true,
        fused_step: true,
        precision: Precision::F32,
    };
}

/// Purposes of the random streams derived from a chain's seed.
#[derive(Debug, Clone, Copy)]
enum Stream {
    Init = 1,
    Order = 2,
    Noise = 3,
}

/// One `(beta, repetition)` chain of the grid.
#[derive(Debug, Clone, Copy)]
struct Chain {
    beta_index: usize,
    repetition: usize,
    beta: f64,
    a0: f64,
    epochs: usize,
    seed: u64,
}

impl Chain {
    /// The seed of this chain's stream for `purpose`.
    fn stream(&self, purpose: Stream) -> u64 {
        splitmix64(self.seed ^ (purpose as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
}

/// A well-mixed 64-bit hash (SplitMix64's finaliser), so that neighbouring chain indices get
/// unrelated seeds.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs every chain of the grid `config` on `data` the way `execution` says, on `device`,
/// and summarises them.
///
/// Every chain is the same computation whichever way it runs: its initialisation, batch order
/// and (with host noise) its noise come from its own seed. Chains are ordered by epoch count,
/// longest first, so that the chains still running are always a prefix of the member axis.
pub fn run_grid<B: QuenchBackend>(
    config: &Valid<GridConfig>,
    data: &GridData,
    execution: &Execution,
    device: &B::Device,
) -> Result<GridResult, SgldError> {
    let outcomes = run_grid_shard::<B>(config, data, execution, Shard::ALONE, device)?;
    Ok(GridResult::new(config, data, outcomes))
}

/// The `(beta, repetition)` chains of the grid that rank `shard` runs: the grid's chains
/// ordered longest first, then dealt round-robin ([`Shard::members`]), so each rank gets an
/// even share of the epochs. Each is `(beta index, repetition)`.
pub fn shard_chains(config: &GridConfig, shard: Shard) -> Vec<(usize, usize)> {
    let chains = ordered_chains(config);
    shard
        .members(chains.len())
        .into_iter()
        .map(|i| (chains[i].beta_index, chains[i].repetition))
        .collect()
}

/// Runs rank `shard`'s chains of the grid ([`shard_chains`]) and scores them; the outcomes of
/// every rank together are those of [`run_grid`], chain for chain.
pub fn run_grid_shard<B: QuenchBackend>(
    config: &Valid<GridConfig>,
    data: &GridData,
    execution: &Execution,
    shard: Shard,
    device: &B::Device,
) -> Result<Vec<ChainOutcome>, SgldError> {
    execution.precision.check::<B>(device)?;
    let all = ordered_chains(config);
    let chains: Vec<Chain> = shard
        .members(all.len())
        .into_iter()
        .map(|i| all[i])
        .collect();
    if chains.is_empty() {
        return Ok(Vec::new());
    }
    if execution.batched {
        return run_chains::<B>(&chains, config, data, execution, device);
    }
    let mut outcomes = Vec::with_capacity(chains.len());
    for chain in &chains {
        outcomes.extend(run_chains::<B>(
            std::slice::from_ref(chain),
            config,
            data,
            execution,
            device,
        )?);
    }
    Ok(outcomes)
}

/// Every chain of the grid with its seed, longest first (a stable sort: ties keep grid order).
fn ordered_chains(config: &GridConfig) -> Vec<Chain> {
    let mut chains: Vec<Chain> = (0..config.betas.len())
        .flat_map(|k| {
            (0..config.repetitions).map(move |r| Chain {
                beta_index: k,
                repetition: r,
                beta: config.betas[k],
                a0: config.a0[k],
                epochs: config.epochs[k],
                seed: splitmix64(config.seed ^ splitmix64((k * config.repetitions + r) as u64)),
            })
        })
        .collect();
    chains.sort_by_key(|c| Reverse(c.epochs));
    chains
}

/// Runs `chains` (longest first) as one program and scores their final states.
fn run_chains<B: QuenchBackend>(
    chains: &[Chain],
    config: &GridConfig,
    data: &GridData,
    execution: &Execution,
    device: &B::Device,
) -> Result<Vec<ChainOutcome>, SgldError> {
    let of = |f: fn(&Chain) -> f64| chains.iter().map(f).collect::<Vec<_>>();
    let repetitions: Vec<usize> = chains.iter().map(|c| c.repetition).collect();
    let order_seeds: Vec<u64> = chains.iter().map(|c| c.stream(Stream::Order)).collect();
    let noise_seeds: Vec<u64> = chains.iter().map(|c| c.stream(Stream::Noise)).collect();
    let noise = match execution.noise {
        NoiseSource::Device => Noise::counter(&noise_seeds),
        NoiseSource::Host => Noise::host(&noise_seeds),
    };
    let epochs: Vec<usize> = chains.iter().map(|c| c.epochs).collect();
    let schedule = ChainSchedule::new(&of(|c| c.beta), &of(|c| c.a0), &epochs);
    let loss = BoundedLoss {
        l_max: config.l_max,
    };
    let init_seeds: Vec<u64> = chains.iter().map(|c| c.stream(Stream::Init)).collect();
    let mut batch = ChainBatch::<B>::new(
        &[data.sample_len(), config.hidden, 1],
        &init_seeds,
        schedule,
        Sgld {
            prior_sigma: config.prior_sigma,
            noise,
        },
        loss,
        StepOptions {
            scale: config.loss,
            fused: execution.fused_step,
            precision: execution.precision,
        },
        device,
    );
    let loader_config = LoaderConfig {
        batch_size: config.batch_size,
        shuffle: true,
        drop_last: false,
        mode: if execution.resident_data {
            Mode::Resident
        } else {
            Mode::ON_CALLER
        },
    };
    let loader_for = |running: usize| {
        Loader::<B::InnerBackend>::new(
            data.train_sets(&repetitions[..running]),
            &order_seeds[..running],
            &loader_config,
            device,
        )
    };
    let mut running = chains.len();
    let mut loader = loader_for(running)?;
    // Parameters of chains that left the program, in the order they left (last chains first).
    let mut finished = Vec::new();
    for epoch in 0..epochs[0] {
        if execution.compact {
            let still = epochs.iter().take_while(|&&e| e > epoch).count();
            if still < running {
                finished.push(batch.retain(still));
                running = still;
                loader = loader_for(running)?;
            }
        }
        let scales = batch.scales(epoch);
        for minibatch in loader.epoch(epoch as u64) {
            let labels = minibatch.labels.float().unsqueeze_to(2);
            batch.step(minibatch.features, labels, &scales);
        }
    }
    let params = finished
        .into_iter()
        .rev()
        .fold(batch.params(), |head, tail| {
            head.into_iter()
                .zip(tail)
                .map(|(h, t)| Tensor::cat(vec![h, t], 0))
                .collect()
        });
    let train = evaluate(&params, &data.train_sets(&repetitions), &loss);
    let test = evaluate(&params, &data.test_sets(&repetitions), &loss);
    Ok(chains
        .iter()
        .enumerate()
        .map(|(i, c)| ChainOutcome {
            beta_index: c.beta_index,
            repetition: c.repetition,
            train_loss: loss.to_unit(train.loss[i]),
            test_loss: loss.to_unit(test.loss[i]),
            train_error: train.error[i],
            test_error: test.error[i],
        })
        .collect())
}
