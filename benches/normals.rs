//! Standard normals for one SGLD step of the full SYNTH grid (240 chains x 3,001 parameters):
//! burn-ndarray's `Tensor::random`, against the counter-based Threefry stream as host code
//! (the CPU backend's path) and as integer tensor ops (the path other backends take). Beside
//! them, the host kernel of the dropout masks (same stream, a comparison per word instead of
//! Box-Muller) at the size of one Transformer layer's feed-forward mask.

// criterion_group! defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

quench_support::aligned_allocator!();

use std::hint::black_box;

use burn::backend::NdArray;
use burn::tensor::{Distribution, Tensor};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use quench_data::WindowConfig;
use quench_kernels::ops::random::{NormalStreams, dropout_mask_host, normals_tensor};
use quench_kernels::threefry::StreamKey;
use quench_temporal::{ModelKind, TemporalConfig};

type Cpu = NdArray<f32>;

const MEMBERS: usize = 240;
const PER_MEMBER: usize = 3_001;

fn normals(c: &mut Criterion) {
    let device = Default::default();
    let seeds: Vec<u64> = (0..MEMBERS as u64).collect();
    let mut group = c.benchmark_group("normals_240x3001");
    group.throughput(Throughput::Elements((MEMBERS * PER_MEMBER) as u64));
    group.sample_size(20);
    group.bench_function("tensor_random", |b| {
        b.iter(|| {
            black_box(Tensor::<Cpu, 2>::random(
                [MEMBERS, PER_MEMBER],
                Distribution::Normal(0.0, 1.0),
                &device,
            ))
        });
    });
    let mut streams = NormalStreams::new(&seeds);
    group.bench_function("threefry_host", |b| {
        b.iter(|| black_box(streams.next::<Cpu>(PER_MEMBER, &device)));
    });
    let keys: Vec<StreamKey> = seeds.iter().map(|&s| StreamKey::from_seed(s)).collect();
    group.bench_function("threefry_tensor_ops", |b| {
        b.iter(|| black_box(normals_tensor::<Cpu>(&keys, 0, PER_MEMBER, &device)));
    });
    group.finish();
}

/// The temporal Transformer's feed-forward dropout mask as its training draws it: its batch of
/// windows x bars x feed-forward units, at its keep probability.
fn masks(c: &mut Criterion) {
    let config = TemporalConfig::for_model(ModelKind::Transformer);
    let values = config.batch_size * WindowConfig::default().window * config.widths.feed_forward;
    let keep = 1.0 - config.dropout;
    let mut group = c.benchmark_group(format!("dropout_mask_{values}"));
    group.throughput(Throughput::Elements(values as u64));
    group.sample_size(20);
    let key = StreamKey::from_seed(7);
    group.bench_function("threefry_host", |b| {
        // Given back to the buffer pool as training's masks are, so that the allocator's
        // zeroing of a fresh buffer is not what is timed.
        b.iter(|| quench_host::buffers::recycle(black_box(dropout_mask_host(key, values, keep))));
    });
    group.finish();
}

criterion_group!(benches, normals, masks);
criterion_main!(benches);
