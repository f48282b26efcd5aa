//! Lindblad solvers per batch of tasks: forward, and forward + backward (gradient of the
//! guide's loss `1 - |Tr(rho sigma)|^2` with respect to the amplitudes), for 1, 16, 256, 1,024 and
//! 4,096 tasks with Euler dt 0.02, RK4 dt 0.01 and the exact propagator, on the guide's
//! one-qubit system with 20 segments over T = 1, on the CPU backend. Throughput is in tasks.

// criterion_group! defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

quench_support::aligned_allocator!();

use quench_kernels::reductions::Reduce;
use std::hint::black_box;
use std::time::Duration;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Element, Tensor, TensorData};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quench_kernels::QuenchOps;
use quench_lindblad::{
    Basis, Batch, Generators, Method, Output, Solver, fidelity, operators, presets,
};

type Cpu = NdArray<f32>;
type Diff = Autodiff<Cpu>;

const SEGMENTS: usize = 20;
const TASK_COUNTS: [usize; 5] = [1, 16, 256, 1024, 4096];
const METHODS: [(&str, Method); 3] = [
    ("euler_dt0.02", Method::Euler { dt: 0.02 }),
    ("rk4_dt0.01", Method::Rk4 { dt: 0.01 }),
    ("exact", Method::Exact),
];

/// The inputs of one batch: amplitudes spread over `[-2, 2]` (deterministic, not all alike),
/// the guide's small rates, start `|0>`, target `|1>` (the X gate's).
struct Inputs<B: QuenchOps> {
    amplitudes: Tensor<B, 3>,
    rates: Tensor<B, 2>,
    initial: Tensor<B, 2>,
    target: Tensor<B, 2>,
}

fn float<B: QuenchOps, const D: usize>(data: Vec<f64>, shape: [usize; D]) -> Tensor<B, D> {
    let device = Default::default();
    Tensor::from_data(
        TensorData::new(data, shape),
        (&device, <B::FloatElem as Element>::dtype()),
    )
}

fn inputs<B: QuenchOps>(tasks: usize) -> Inputs<B> {
    let basis = Basis::gell_mann(2);
    let amplitudes = (0..tasks * SEGMENTS * 2)
        .map(|i| 2.0 * ((i as f64) * 0.618_034).sin())
        .collect();
    let rates = (0..tasks * 3).map(|i| 1e-4 * (1 + i % 5) as f64).collect();
    let start = basis
        .coordinates(&operators::basis_state(2, 0))
        .expect("a qubit's state");
    let target = basis
        .coordinates(&operators::basis_state(2, 1))
        .expect("a qubit's state");
    Inputs {
        amplitudes: float(amplitudes, [tasks, SEGMENTS, 2]),
        rates: float(rates, [tasks, 3]),
        initial: float(start.repeat(tasks), [tasks, 4]),
        target: float(target, [1, 4]),
    }
}

fn loss<B: QuenchOps>(
    solver: &Solver,
    generators: &Generators<B>,
    inputs: Inputs<B>,
) -> Tensor<B, 1> {
    let batch = Batch {
        t_total: 1.0,
        amplitudes: inputs.amplitudes,
        rates: inputs.rates,
        initial: inputs.initial,
    };
    let states = solver
        .evolve(generators, batch, Output::States)
        .expect("valid batch")
        .states;
    fidelity::squared_overlap(states, inputs.target)
        .expect("one target for all tasks")
        .neg()
        .add_scalar(1.0)
        .sum_all()
}

fn lindblad(c: &mut Criterion) {
    // As the benchmark binary and the examples do: freed buffers are reused, not unmapped.
    quench_support::allocator::keep_freed_memory();
    let system = presets::one_qubit();
    let device = Default::default();
    let forward_generators = Generators::<Cpu>::upload(&system, &device);
    let backward_generators = Generators::<Diff>::upload(&system, &device);
    for (name, method) in METHODS {
        let solver = Solver {
            method,
            ..Solver::default()
        };
        let mut group = c.benchmark_group(format!("lindblad_{name}"));
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(2));
        for tasks in TASK_COUNTS {
            group.throughput(Throughput::Elements(tasks as u64));
            group.bench_with_input(BenchmarkId::new("forward", tasks), &tasks, |b, &tasks| {
                b.iter_batched(
                    || inputs::<Cpu>(tasks),
                    |inputs| black_box(loss(&solver, &forward_generators, inputs)),
                    criterion::BatchSize::LargeInput,
                );
            });
            group.bench_with_input(
                BenchmarkId::new("forward_backward", tasks),
                &tasks,
                |b, &tasks| {
                    b.iter_batched(
                        || inputs::<Diff>(tasks),
                        |mut inputs| {
                            inputs.amplitudes = inputs.amplitudes.require_grad();
                            let amplitudes = inputs.amplitudes.clone();
                            let gradients = loss(&solver, &backward_generators, inputs).backward();
                            black_box(amplitudes.grad(&gradients))
                        },
                        criterion::BatchSize::LargeInput,
                    );
                },
            );
        }
        group.finish();
    }
}

criterion_group!(benches, lindblad);
criterion_main!(benches);
