//! One member-Adam step over the qRNG GAN generator's parameters (4,096 -> 128 -> 256 ->
//! 4,096, weights and biases, 3 matches as members: 4.8M values): the fused update of the CPU
//! backend (one pass per parameter over host memory) against the op-by-op tensor update.

// criterion_group! defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

quench_support::aligned_allocator!();

use std::hint::black_box;

use burn::backend::NdArray;
use burn::tensor::{Distribution, Tensor};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use quench_train::optim::{AdamConfig, MemberAdam};

type Cpu = NdArray<f32>;

const MEMBERS: usize = 3;
const WIDTHS: [usize; 4] = [4096, 128, 256, 4096];

fn adam(c: &mut Criterion) {
    let device = Default::default();
    let dims: Vec<[usize; 3]> = WIDTHS
        .windows(2)
        .flat_map(|w| [[MEMBERS, w[0], w[1]], [MEMBERS, 1, w[1]]])
        .collect();
    let random =
        |d: [usize; 3]| Tensor::<Cpu, 3>::random(d, Distribution::Normal(0.0, 0.1), &device);
    let grads: Vec<Tensor<Cpu, 3>> = dims.iter().map(|&d| random(d)).collect();
    let values: u64 = dims.iter().map(|d| (d[0] * d[1] * d[2]) as u64).sum();
    let lr = Tensor::<Cpu, 3>::full([1, 1, 1], 1e-3, &device);
    let mut group = c.benchmark_group("member_adam_gan_generator_3_members");
    group.throughput(Throughput::Elements(values));
    group.sample_size(20);
    for (name, fused) in [("fused_host", true), ("op_by_op", false)] {
        let mut optimiser = if fused {
            MemberAdam::<Cpu>::new(AdamConfig::default(), MEMBERS, &device)
        } else {
            MemberAdam::<Cpu>::unfused(AdamConfig::default(), MEMBERS, &device)
        };
        let mut params: Vec<Tensor<Cpu, 3>> = dims.iter().map(|&d| random(d)).collect();
        group.bench_function(name, |b| {
            b.iter(|| {
                params = optimiser.step(params.clone(), grads.clone(), lr.clone(), None);
                black_box(&params);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, adam);
criterion_main!(benches);
