//! One SGLD step (forward, bounded loss, backward, Langevin update) of the full SYNTH grid's
//! 240 chains batched (4 -> 500 -> 1 networks, minibatches of 10), against one chain alone
//! (the batched step replaces 240 of those): autodiff with host `StdRng` noise (the original's
//! way), autodiff with counter-based noise, and the fused step (hand-derived gradients, noise
//! and update in one pass per chain).

// criterion_group! defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

quench_support::aligned_allocator!();

use std::hint::black_box;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Distribution, Tensor};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quench_device::Precision;
use quench_sgld::{
    BoundedLoss, ChainBatch, ChainSchedule, LossScale, Noise, NoiseSource, Sgld, StepOptions,
};

type Cpu = NdArray<f32>;
type Ad = Autodiff<Cpu>;

/// Chains of the full SYNTH grid: 8 inverse temperatures x 30 repetitions.
const CHAINS: usize = 240;
const BATCH: usize = 10;
const WIDTHS: [usize; 3] = [4, 500, 1];

fn bench_step(c: &mut Criterion, chains: usize, source: NoiseSource, fused: bool) {
    let device = Default::default();
    let seeds: Vec<u64> = (0..chains as u64).collect();
    let noise = match source {
        NoiseSource::Device => Noise::counter(&seeds),
        NoiseSource::Host => Noise::host(&seeds),
    };
    let schedule = ChainSchedule::new(&vec![100.0; chains], &vec![0.1; chains], &vec![1; chains]);
    let mut batch = ChainBatch::<Ad>::new(
        &WIDTHS,
        &seeds,
        schedule,
        Sgld {
            prior_sigma: 1_000.0,
            noise,
        },
        BoundedLoss { l_max: 4.0 },
        StepOptions {
            scale: LossScale::Unit,
            fused,
            precision: Precision::F32,
        },
        &device,
    );
    let x = Tensor::<Cpu, 3>::random(
        [chains, BATCH, WIDTHS[0]],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let y = Tensor::<Cpu, 3>::random([chains, BATCH, 1], Distribution::Bernoulli(0.5), &device);
    let scales = batch.scales(0);
    let mut group = c.benchmark_group("sgld_step_synth_4x500x1_b10");
    group.throughput(Throughput::Elements(chains as u64));
    group.sample_size(20);
    let name = match (source, fused) {
        (NoiseSource::Device, true) => "fused_step",
        (NoiseSource::Device, false) => "autodiff_counter_noise",
        (NoiseSource::Host, _) => "autodiff_host_noise",
    };
    group.bench_function(BenchmarkId::new(name, format!("{chains}_chains")), |b| {
        b.iter(|| {
            batch.step(x.clone(), y.clone(), &scales);
            // The CPU backend runs each step before returning; the output is kept alive.
            black_box(&batch);
        });
    });
    group.finish();
}

fn sgld_step(c: &mut Criterion) {
    for chains in [1, CHAINS] {
        for (source, fused) in [
            (NoiseSource::Host, false),
            (NoiseSource::Device, false),
            (NoiseSource::Device, true),
        ] {
            bench_step(c, chains, source, fused);
        }
    }
}

criterion_group!(benches, sgld_step);
criterion_main!(benches);
