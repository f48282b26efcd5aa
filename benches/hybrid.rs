//! One training step of guide 003's hybrid classifier (one member, f32, CPU backend): the
//! frozen ResNet18 forward on 64 images plus the step, as the original runs every batch
//! (target, issue 14: <= 0.3 s), and the step alone on pre-computed features at batch 64 and
//! 256 (target: an epoch of 54,000 images <= 10 s, i.e. <= 11.8 ms per batch of 64), with the
//! fused circuit and, for comparison, the host parameter-shift circuit of the baseline. And a
//! whole one-epoch run as the workload's `all` variant trains it (fused circuit, features
//! computed once, batch 256, one seed; random backbone weights and images): every image's
//! features, the training batches, the validation pass and the test evaluation; its
//! throughput in training images; beside it, that run's backbone features alone; both on a
//! thread of the runs' pool, as the workload runs.

// criterion_group! defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

quench_support::aligned_allocator!();

use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use std::hint::black_box;
use std::time::Duration;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Distribution, Int, Tensor};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quench_circuit::Circuit;
use quench_device::Precision;
use quench_host::lanes::on_host_threads;
use quench_hybrid::model::{ENCODER, HEAD};
use quench_hybrid::resnet::ResNet18;
use quench_hybrid::training::{HybridConfig, train_hybrid};
use quench_hybrid::{CircuitMode, HybridModel};
use quench_train::classify::cross_entropy;
use quench_train::ensemble::{Activation, seeded_ensemble};
use quench_train::init::Init;
use quench_train::optim::{AdamConfig, MemberAdam};
use quench_train::params::{clip_member_norms, gradients, require_grad};
use quench_train::settings::Valid;

use quench_benches::{EPOCH_TRAIN_IMAGES, HYBRID_ALL, epoch_images};

type Cpu = NdArray<f32>;
type Diff = Autodiff<Cpu>;

/// One Adam step of `model` on `features` `[1, batch, 512]` and `labels` `[1, batch]`.
fn step(
    model: &HybridModel<Diff>,
    params: Vec<Tensor<Cpu, 3>>,
    adam: &mut MemberAdam<Cpu>,
    features: Tensor<Cpu, 3>,
    labels: Tensor<Cpu, 2, Int>,
    lr: &Tensor<Cpu, 3>,
) -> Vec<Tensor<Cpu, 3>> {
    let p = require_grad::<Diff>(params.clone());
    let logits = model.forward(&p, Tensor::from_inner(features), 0.2, Precision::F32);
    let loss = cross_entropy(logits, Tensor::from_inner(labels)).sum_all();
    let grads = clip_member_norms(gradients(&p, &loss.backward()), 1.0);
    adam.step(params, grads, lr.clone(), None)
}

fn hybrid(c: &mut Criterion) {
    let device = Default::default();
    let circuit = Circuit::angle_encoded_ring(4, 3).expect("the guide's circuit is valid");
    let backbone = ResNet18::<Cpu>::random(&device, 7);
    let lr = Tensor::<Cpu, 3>::full([1, 1, 1], 1e-3, &device);
    let mut group = c.benchmark_group("hybrid_step");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for (name, mode) in [("fused", CircuitMode::Fused), ("host", CircuitMode::Host)] {
        let model = HybridModel::<Diff>::new(circuit.clone(), mode, &device)
            .expect("the guide's 4-qubit circuit fits");
        let mut params = seeded_ensemble::<Cpu>(
            Init::TorchDefault,
            Activation::Relu,
            &ENCODER,
            &[1],
            &device,
        )
        .params();
        params.push(Tensor::random(
            [1, 1, 12],
            Distribution::Normal(0.0, 0.01),
            &device,
        ));
        params.extend(
            seeded_ensemble::<Cpu>(Init::TorchDefault, Activation::Relu, &HEAD, &[2], &device)
                .params(),
        );
        for (what, batch) in [("backbone", 64usize), ("features", 64), ("features", 256)] {
            group.throughput(Throughput::Elements(batch as u64));
            let images = Tensor::<Cpu, 4>::random(
                [batch, 1, 28, 28],
                Distribution::Normal(0.0, 1.0),
                &device,
            );
            let features = backbone.forward(images.clone()).reshape_to([1, batch, 512]);
            let labels =
                Tensor::<Cpu, 2, Int>::from_data([[3i64; 1]; 1], &device).repeat_dim(1, batch);
            let mut adam = MemberAdam::<Cpu>::new(AdamConfig::default(), 1, &device);
            group.bench_with_input(
                BenchmarkId::new(format!("{what}_{name}"), batch),
                &batch,
                |b, &batch| {
                    b.iter(|| {
                        let features = if what == "backbone" {
                            backbone.forward(images.clone()).reshape_to([1, batch, 512])
                        } else {
                            features.clone()
                        };
                        let updated = step(
                            &model,
                            params.clone(),
                            &mut adam,
                            features,
                            labels.clone(),
                            &lr,
                        );
                        black_box(updated[0].clone().into_data())
                    })
                },
            );
        }
    }
    group.finish();
}

fn epoch(c: &mut Criterion) {
    quench_support::allocator::keep_freed_memory();
    let device = Default::default();
    let backbone = ResNet18::<Cpu>::random(&device, 7);
    let data = epoch_images();
    let config = Valid::new(HybridConfig {
        epochs: 1,
        batch_size: 256,
        ..HybridConfig::default()
    })
    .unwrap_or_else(|err| panic!("the bench's settings: {err}"));
    let mut group = c.benchmark_group("hybrid_epoch");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(EPOCH_TRAIN_IMAGES as u64));
    // Both on a thread of the runs' pool, as `run_on` runs the workload (the user's clock).
    group.bench_function("all", |b| {
        b.iter(|| {
            let outcome = on_host_threads(|| {
                train_hybrid::<Diff>(&data, &backbone, &config, &HYBRID_ALL, &device)
            })
            .unwrap_or_else(|err| panic!("a hybrid epoch: {err}"));
            black_box(outcome.epochs)
        })
    });
    // The run's inference pass alone: every image's backbone features (the three parts, the
    // product weights made once), as the run computes them before its first batch.
    group.bench_function("backbone-features", |b| {
        b.iter(|| {
            let parts = on_host_threads(|| data.features(&backbone, &device))
                .unwrap_or_else(|err| panic!("the features: {err}"));
            black_box(parts.train.len())
        })
    });
    group.finish();
}

criterion_group!(benches, hybrid, epoch);
criterion_main!(benches);
