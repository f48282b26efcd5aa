//! Host allocations in the steady state of a run: the blocks the allocator hands out (and
//! their bytes) per training step of guide 004's temporal models and guide 003's hybrid, and
//! per epoch of guide 000's GAN tournament, CPU backend, as each workload's `all` variant
//! trains. Counted by the program's global allocator
//! ([`quench_support::allocator::CountingVectorAligned`]) around two runs that differ only in
//! their epochs: the difference is the extra epochs' own, the run's set-up (data, networks,
//! the hybrid's features) taken out. Validation passes are part of each epoch, so a training
//! step's share includes them. Prints a table; `docs/benchmarks.md` keeps the figures.
//! `cargo bench -p quench-benches --bench allocations`.

// A bench program's `main` needs no documentation beyond the module's.
#![allow(missing_docs)]

quench_support::counting_allocator!();

use burn::backend::{Autodiff, NdArray};
use quench_benches::{HYBRID_ALL, epoch_images, epoch_market};
use quench_hybrid::resnet::ResNet18;
use quench_hybrid::training::{HybridConfig, train_hybrid};
use quench_qrng::Batching;
use quench_qrng::gan::{GanConfig, gan_tournament};
use quench_support::allocator::{Allocations, keep_freed_memory};
use quench_temporal::{Execution, ModelKind, TemporalConfig, train_temporal};
use quench_train::settings::Valid;

type Cpu = NdArray<f32>;
type Diff = Autodiff<Cpu>;

/// Epochs of the shorter and the longer run.
const EPOCHS: [usize; 2] = [1, 3];

/// What `run(epochs)` allocates per unit (its own count of units per epoch, returned by each
/// run) over the epochs the longer run adds.
fn per_unit(name: &str, mut run: impl FnMut(usize) -> usize) {
    let counted = EPOCHS.map(|epochs| {
        let before = Allocations::now();
        let units = run(epochs);
        (Allocations::now().since(before), units)
    });
    let [(short, _), (long, units_per_epoch)] = counted;
    let extra = long.since(short);
    let units = ((EPOCHS[1] - EPOCHS[0]) * units_per_epoch).max(1) as f64;
    println!(
        "{name:<40} {:>10.0} blocks {:>10.2} MB",
        extra.blocks as f64 / units,
        extra.bytes as f64 / units / 1e6
    );
}

fn main() {
    // As the benchmark binary runs (freed blocks reused); the counts do not depend on it.
    keep_freed_memory();
    let device = Default::default();
    println!("per training step (validation's share included), or per GAN epoch:");
    let market = epoch_market();
    for (kind, model) in [
        (ModelKind::Lstm, "temporal-lstm"),
        (ModelKind::Transformer, "temporal-transformer"),
    ] {
        let batch = TemporalConfig::for_model(kind).batch_size;
        let name = format!("{model} all, per step of {batch}");
        per_unit(&name, |epochs| {
            let config = Valid::new(TemporalConfig {
                epochs,
                ..TemporalConfig::for_model(kind)
            })
            .unwrap_or_else(|err| panic!("{name}: {err}"));
            let outcome = train_temporal::<Diff>(&market, &config, &Execution::default(), &device)
                .unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_eq!(outcome.epochs, epochs, "{name}: stopped early");
            outcome.batches_per_epoch
        });
    }
    let backbone = ResNet18::<Cpu>::random(&device, 7);
    let data = epoch_images();
    per_unit("hybrid all, per step of 256", |epochs| {
        let config = Valid::new(HybridConfig {
            epochs,
            batch_size: 256,
            ..HybridConfig::default()
        })
        .unwrap_or_else(|err| panic!("hybrid: {err}"));
        let outcome = train_hybrid::<Diff>(&data, &backbone, &config, &HYBRID_ALL, &device)
            .unwrap_or_else(|err| panic!("hybrid: {err}"));
        assert_eq!(outcome.epochs, epochs, "hybrid: stopped early");
        outcome.batches_per_epoch
    });
    let strings = quench_qrng::synthetic_recording(2_000, 5)
        .unwrap_or_else(|err| panic!("the GAN's recording: {err}"));
    per_unit("qrng-gan all, per epoch of 3 matches", |epochs| {
        let config = Valid::new(GanConfig {
            epochs,
            ..GanConfig::default()
        })
        .unwrap_or_else(|err| panic!("qrng-gan: {err}"));
        gan_tournament::<Diff>(&strings, &config, Batching::Members, &device)
            .unwrap_or_else(|err| panic!("qrng-gan: {err}"));
        1
    });
}
