//! One training step of a member-axis MLP (forward, backward, member Adam) against the same
//! members stepped one at a time: the batching that every workload relies on, on the qRNG
//! classifier's shape (100 -> 30 -> 20 -> 3, batch 128 per member), CPU backend. Throughput
//! is in member-steps.

// criterion_group! defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

quench_support::aligned_allocator!();

use quench_kernels::reductions::Reduce;
use std::hint::black_box;
use std::time::Duration;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Distribution, Tensor};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quench_train::ensemble::{Activation, EnsembleMlp};
use quench_train::init::Init;
use quench_train::optim::{AdamConfig, MemberAdam};
use quench_train::params::{gradients, require_grad, values};

type Cpu = NdArray<f32>;
type Diff = Autodiff<Cpu>;

const WIDTHS: [usize; 4] = [100, 30, 20, 3];
const BATCH: usize = 128;

/// One Adam step of `mlp` on inputs `x` `[members, BATCH, 100]` with a squared-output loss.
fn step(
    mlp: &EnsembleMlp<Cpu>,
    adam: &mut MemberAdam<Cpu>,
    x: &Tensor<Cpu, 3>,
    lr: &Tensor<Cpu, 3>,
) -> EnsembleMlp<Cpu> {
    let p = require_grad::<Diff>(mlp.params());
    let model = EnsembleMlp::<Diff>::from_params(p.clone(), mlp.activation);
    let loss = model
        .forward(Tensor::from_inner(x.clone()))
        .powi_scalar(2)
        .mean_all();
    let grads = loss.backward();
    let updated = adam.step(values(&p), gradients(&p, &grads), lr.clone(), None);
    mlp.with_params(updated)
}

fn ensemble(c: &mut Criterion) {
    let device = Default::default();
    let mut group = c.benchmark_group("ensemble_mlp_step");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for members in [1usize, 4, 16, 64] {
        group.throughput(Throughput::Elements(members as u64));
        let x = Tensor::<Cpu, 3>::random(
            [members, BATCH, WIDTHS[0]],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let lr = Tensor::<Cpu, 3>::full([1, 1, 1], 1e-3, &device);
        group.bench_with_input(
            BenchmarkId::new("batched", members),
            &members,
            |b, &members| {
                let mlp = EnsembleMlp::<Cpu>::new(
                    Init::XavierUniform { gain: 1.0 },
                    Activation::Relu,
                    members,
                    &WIDTHS,
                    1,
                    &device,
                );
                let mut adam = MemberAdam::new(AdamConfig::default(), members, &device);
                b.iter(|| black_box(step(&mlp, &mut adam, &x, &lr)));
            },
        );
        group.bench_with_input(
            BenchmarkId::new("one_at_a_time", members),
            &members,
            |b, &members| {
                let singles: Vec<_> = (0..members)
                    .map(|m| {
                        EnsembleMlp::<Cpu>::new(
                            Init::XavierUniform { gain: 1.0 },
                            Activation::Relu,
                            1,
                            &WIDTHS,
                            m as u64,
                            &device,
                        )
                    })
                    .collect();
                let mut adams: Vec<_> = (0..members)
                    .map(|_| MemberAdam::new(AdamConfig::default(), 1, &device))
                    .collect();
                let inputs: Vec<_> = (0..members).map(|m| x.clone().narrow(0, m, 1)).collect();
                b.iter(|| {
                    for ((mlp, adam), x) in singles.iter().zip(adams.iter_mut()).zip(&inputs) {
                        black_box(step(mlp, adam, x, &lr));
                    }
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, ensemble);
criterion_main!(benches);
