//! Guide 003's circuit (4 qubits: RY encoding, 3 layers of RY and a CNOT ring, <Z_i> read-out)
//! on a batch of 1 to 65,536 samples, forward and forward+backward (gradients to the inputs and
//! the 12 weights), gate by gate and fused, CPU backend. Target (issue 14): batch 4,096
//! forward+backward <= 5 ms on the 2-core CPU. Throughput is in circuits.

// criterion_group! defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

quench_support::aligned_allocator!();

use quench_kernels::reductions::Reduce;
use std::hint::black_box;
use std::time::Duration;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Distribution, Tensor};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quench_circuit::{Circuit, Mode, Simulator};

type Cpu = NdArray<f32>;
type Diff = Autodiff<Cpu>;

fn circuit(c: &mut Criterion) {
    let device = Default::default();
    let guide = Circuit::angle_encoded_ring(4, 3).expect("the guide's circuit is valid");
    for (name, mode) in [("gate_by_gate", Mode::GateByGate), ("fused", Mode::Fused)] {
        let mut group = c.benchmark_group(format!("circuit_{name}"));
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(300));
        group.measurement_time(Duration::from_secs(1));
        let forward =
            Simulator::<Cpu>::new(guide.clone(), mode, &device).expect("the guide's circuit fits");
        let training =
            Simulator::<Diff>::new(guide.clone(), mode, &device).expect("the guide's circuit fits");
        for batch in [1usize, 64, 4096, 65_536] {
            group.throughput(Throughput::Elements(batch as u64));
            let x = Tensor::<Cpu, 2>::random([batch, 4], Distribution::Normal(0.0, 1.0), &device);
            let w = Tensor::<Cpu, 2>::random([1, 12], Distribution::Normal(0.0, 0.1), &device);
            group.bench_with_input(BenchmarkId::new("forward", batch), &batch, |b, &batch| {
                b.iter(|| {
                    let state = forward
                        .run(batch, Some(x.clone()), Some(w.clone()))
                        .expect("shapes match");
                    black_box(forward.z_expectations(&state).unwrap().into_data())
                })
            });
            group.bench_with_input(
                BenchmarkId::new("forward_backward", batch),
                &batch,
                |b, &batch| {
                    b.iter(|| {
                        let xd = Tensor::<Diff, 2>::from_inner(x.clone()).require_grad();
                        let wd = Tensor::<Diff, 2>::from_inner(w.clone()).require_grad();
                        let state = training
                            .run(batch, Some(xd.clone()), Some(wd.clone()))
                            .expect("shapes match");
                        let grads = training
                            .z_expectations(&state)
                            .unwrap()
                            .sum_all()
                            .backward();
                        let gx = xd.grad(&grads).map(|g| g.into_data());
                        black_box((gx, wd.grad(&grads).map(|g| g.into_data())))
                    })
                },
            );
        }
        group.finish();
    }
}

criterion_group!(benches, circuit);
criterion_main!(benches);
