//! One training step (forward, backward, gradients read out) of guide 004's models at the
//! guide's batch of 256 windows of 20 bars x 29 features, one seed, CPU backend: the LSTM with
//! the fused recurrence (in as many lanes as cores, and in one) against `burn::nn::Lstm`, and
//! the Transformer, with dropout off (as `peers/temporal_step.py` times PyTorch's); and each
//! model's step as its training takes it, with the model's dropout rate (`-trained`), the
//! step an epoch's run is made of. Throughput is in
//! windows; `docs/benchmarks.md` turns it into GFLOP/s against `benchmark doctor`'s matmul.
//! And one LSTM layer alone, forward and backward, its throughput in flops. And a whole
//! one-epoch run of each model as the workload's `all` variant trains it (the guide's widths
//! and batch, one seed, a synthetic market of two symbols): the network made, the windows
//! uploaded, every training batch, the validation pass, the test evaluation; its throughput in
//! training windows, to set beside the step's; on a thread of the runs' pool, as the workload
//! runs. And one encoder layer's attention (the host kernel at the Transformer's shape, its
//! dropout mask, forward and backward), on that pool too.

// criterion_group! defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

quench_support::aligned_allocator!();

use std::hint::black_box;
use std::time::Duration;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Distribution, Int, Tensor};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quench_device::Precision;
use quench_host::lanes::on_host_threads;
use quench_kernels::QuenchOps;
use quench_kernels::ops::attention::AttentionInputs;
use quench_temporal::step::{Objective, step_gradients};
use quench_temporal::{
    Execution, LstmCore, ModelKind, TemporalConfig, TemporalNet, Widths, train_temporal,
};
use quench_train::amp::MixedPrecision;
use quench_train::settings::Valid;

use quench_benches::epoch_market;

type Cpu = NdArray<f32>;
type Diff = Autodiff<Cpu>;

const BATCH: usize = 256;
const WINDOW: usize = 20;
const FEATURES: usize = 29;

/// One step as training takes it (the fused LSTM's recurrence differentiated by hand, the
/// rest by autodiff) at dropout rate `dropout`; returns the gradients so the work cannot be
/// skipped.
fn step(
    net: &TemporalNet<Diff>,
    params: &[Tensor<Cpu, 3>],
    x: &Tensor<Cpu, 4>,
    labels: &Tensor<Cpu, 2, Int>,
    amp: &mut MixedPrecision,
    lanes: usize,
    dropout: f64,
) -> Vec<Tensor<Cpu, 3>> {
    let objective = Objective {
        smoothing: 0.1,
        class_weights: None,
        dropout,
        precision: Precision::F32,
        lanes,
    };
    step_gradients::<Diff>(net, params, &[], x.clone(), labels.clone(), &objective, amp)
        .gradients
        .unwrap_or_default()
}

/// A model of a step bench: kind, LSTM core, lanes, dropout rate, and its name in the group.
type StepCase = (ModelKind, LstmCore, usize, f64, &'static str);

fn temporal(c: &mut Criterion) {
    let cores = quench_kernels::host_lanes::<Cpu>();
    // Both models train at the guide's batch, the steps' here.
    let trained = |kind| {
        let config = TemporalConfig::for_model(kind);
        assert_eq!(config.batch_size, BATCH, "{kind:?} trains at another batch");
        config.dropout
    };
    steps(
        c,
        &[
            (ModelKind::Lstm, LstmCore::Fused, cores, 0.0, "lstm-fused"),
            (
                ModelKind::Lstm,
                LstmCore::Fused,
                1,
                0.0,
                "lstm-fused-one-lane",
            ),
            (ModelKind::Lstm, LstmCore::Burn, 1, 0.0, "lstm-burn"),
            (
                ModelKind::Transformer,
                LstmCore::Fused,
                1,
                0.0,
                "transformer",
            ),
            (
                ModelKind::Lstm,
                LstmCore::Fused,
                cores,
                trained(ModelKind::Lstm),
                "lstm-fused-trained",
            ),
            (
                ModelKind::Transformer,
                LstmCore::Fused,
                1,
                trained(ModelKind::Transformer),
                "transformer-trained",
            ),
        ],
    );
}

/// The training step of each of `cases` at [`BATCH`] windows, in group
/// `temporal_step_b{BATCH}`.
fn steps(c: &mut Criterion, cases: &[StepCase]) {
    let batch = BATCH;
    // As the benchmark binary runs: freed buffers reused, not mapped again every step.
    quench_support::allocator::keep_freed_memory();
    let device = Default::default();
    let x = Tensor::<Cpu, 4>::random(
        [1, batch, WINDOW, FEATURES],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let labels =
        Tensor::<Cpu, 2, Int>::random([1, batch], Distribution::Uniform(0.0, 3.0), &device);
    let mut group = c.benchmark_group(format!("temporal_step_b{batch}"));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(batch as u64));
    for &(kind, core, lanes, dropout, name) in cases {
        let net = TemporalNet::<Diff>::new(kind, Widths::default(), FEATURES, core);
        let inner = TemporalNet::<Cpu>::new(kind, Widths::default(), FEATURES, core);
        let (params, _) = inner.initial_params(&[1], &device);
        let mut amp = MixedPrecision::new(Precision::F32);
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let g = step(&net, &params, &x, &labels, &mut amp, lanes, dropout);
                black_box(g[0].clone().into_data());
            })
        });
    }
    group.finish();
}

/// One bidirectional LSTM layer of the guide's network at batch 256 (the second layer: 256
/// inputs, 128 hidden units per direction, 20 steps), forward and backward through the
/// `QuenchOps` operation, layout changes included; in GFLOP of products per iteration
/// (forward `2 S N 4H (I + H)` per direction, backward twice that).
fn lstm_layer(c: &mut Criterion) {
    quench_support::allocator::keep_freed_memory();
    let device = Default::default();
    let (input, hidden) = (256, 128);
    let layer = quench_temporal::lstm::initial_layer::<Cpu>(&[1], input, hidden, &device);
    let x = Tensor::<Cpu, 4>::random(
        [1, BATCH, WINDOW, input],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let dy = Tensor::<Cpu, 4>::random(
        [1, BATCH, WINDOW, 2 * hidden],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let flops = 3 * 2 * 2 * WINDOW * BATCH * 4 * hidden * (input + hidden);
    let mut group = c.benchmark_group("lstm_layer_b256");
    group.sample_size(20);
    group.throughput(Throughput::Elements(flops as u64));
    let cores = quench_kernels::host_lanes::<Cpu>();
    // One case on a one-core machine (criterion refuses two of the same name).
    let mut cases = vec![cores, 1];
    cases.dedup();
    for lanes in cases {
        group.bench_function(BenchmarkId::new("lanes", lanes), |b| {
            b.iter(|| {
                let (y, tape) = quench_temporal::lstm::forward_taped(&layer, x.clone(), lanes);
                let (g, dx) = quench_temporal::lstm::backward(&layer, tape, dy.clone(), lanes);
                // The CPU backend computes eagerly: the tensors hold the work done.
                black_box((y, g, dx));
            })
        });
    }
    group.finish();
}

/// Windows per inference pass: evaluation's chunk (`EVALUATION_CHUNK` in quench-temporal's
/// training, the most it forwards at once) and a smaller one, whose buffers stay in cache and
/// below the allocator's mapping threshold.
const INFERENCE_WINDOWS: [usize; 2] = [256, 2_048];

/// The tape-less forward pass that validation and test evaluation run (dropout off, the
/// backend without autodiff), one seed: with `temporal_step_b256` and `temporal_epoch`, what
/// an epoch's run is made of.
fn inference(c: &mut Criterion) {
    quench_support::allocator::keep_freed_memory();
    let device = Default::default();
    let mut group = c.benchmark_group("temporal_inference");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    for (kind, name) in [
        (ModelKind::Lstm, "lstm"),
        (ModelKind::Transformer, "transformer"),
    ] {
        let net = TemporalNet::<Cpu>::new(kind, Widths::default(), FEATURES, LstmCore::Fused);
        let (params, state) = net.initial_params(&[1], &device);
        for windows in INFERENCE_WINDOWS {
            let x = Tensor::<Cpu, 4>::random(
                [1, windows, WINDOW, FEATURES],
                Distribution::Normal(0.0, 1.0),
                &device,
            );
            group.throughput(Throughput::Elements(windows as u64));
            group.bench_function(BenchmarkId::new(name, windows), |b| {
                b.iter(|| {
                    let (logits, _) = net.forward(&params, &state, x.clone(), None, Precision::F32);
                    black_box(logits.into_data());
                })
            });
        }
    }
    group.finish();
}

/// One encoder layer's attention at [`BATCH`] windows (the guide's 8 heads of 16 over
/// [`WINDOW`] steps) with a dropout mask of the scores: the forward pass, and forward and
/// backward; in windows.
fn attention(c: &mut Criterion) {
    quench_support::allocator::keep_freed_memory();
    let device = Default::default();
    let (heads, width) = (8, 128);
    let [q, k, v, d_context] = [(); 4].map(|_| {
        Tensor::<Cpu, 3>::random(
            [BATCH, WINDOW, width],
            Distribution::Normal(0.0, 1.0),
            &device,
        )
    });
    let mask = Cpu::dropout_mask::<4>([BATCH, heads, WINDOW, WINDOW].into(), 0.2, &device);
    let inputs = AttentionInputs {
        q,
        k,
        v,
        mask: Some(mask),
        heads,
    };
    let mut group = c.benchmark_group("attention_b256");
    group.sample_size(20);
    group.throughput(Throughput::Elements(BATCH as u64));
    // Each pass on a thread of the runs' pool, as a run's are (its groups split as joins).
    group.bench_function("forward", |b| {
        b.iter(|| black_box(on_host_threads(|| Cpu::attention_forward(&inputs))))
    });
    group.bench_function("forward-backward", |b| {
        b.iter(|| {
            black_box(on_host_threads(|| {
                let out = Cpu::attention_forward(&inputs);
                Cpu::attention_backward(inputs.clone(), out.weights, d_context.clone())
            }))
        })
    });
    group.finish();
}

fn epoch(c: &mut Criterion) {
    quench_support::allocator::keep_freed_memory();
    let device = Default::default();
    let data = epoch_market();
    let mut group = c.benchmark_group("temporal_epoch");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(data.train.windows.len() as u64));
    for (kind, name) in [
        (ModelKind::Lstm, "lstm"),
        (ModelKind::Transformer, "transformer"),
    ] {
        let config = Valid::new(TemporalConfig {
            epochs: 1,
            ..TemporalConfig::for_model(kind)
        })
        .unwrap_or_else(|err| panic!("the bench's {name} settings: {err}"));
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            // On a thread of the runs' pool, as `run_on` runs the workload (the user's clock).
            b.iter(|| {
                let outcome = on_host_threads(|| {
                    train_temporal::<Diff>(&data, &config, &Execution::default(), &device)
                })
                .unwrap_or_else(|err| panic!("a {name} epoch: {err}"));
                black_box(outcome.epochs);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, temporal, lstm_layer, inference, attention, epoch);
criterion_main!(benches);
