//! Host kernel of [`crate::ops::propagate`], in f64: every segment's propagator at once, the
//! matrices batch last as the generators come (`[n, n, segments * tasks]`), so that each step
//! of Horner's rule and each squaring is a loop over the matrices that vectorises
//! ([`SquaredPolynomial::evaluate`]; the gradients by [`SquaredPolynomial::derivative`] at the
//! transposes), columns split over the cores when the work is large; then each task carried
//! through its segments. What is stored (propagators, states, gradients) is rounded to f32
//! once, and the carries read the stored propagators, so that forward and back agree.

use std::ops::Range;

use burn::tensor::Tensor;
use quench_host::lanes::{in_lanes, lanes_for};
use quench_host::small_matrix::{SquaredPolynomial, transpose};
use quench_host::tensor::{Host, from_values, host_values};

use super::{PropagateGradients, PropagateTape};

/// Columns `range` of a `[n, n, columns]` stack, as a stack of their own in f64.
fn columns_of<T: Copy + Into<f64>>(
    stack: &[T],
    n: usize,
    columns: usize,
    range: &Range<usize>,
) -> Vec<f64> {
    (0..n * n)
        .flat_map(|entry| stack[entry * columns + range.start..entry * columns + range.end].iter())
        .map(|&v| v.into())
        .collect()
}

/// `each` of contiguous column ranges of a `[n, n, columns]` stack, over as many lanes as
/// `products` products of `n x n` per column are worth, put back together as one stack.
fn over_columns(
    n: usize,
    columns: usize,
    products: usize,
    each: impl Fn(&Range<usize>) -> Vec<f64> + Sync,
) -> Vec<f64> {
    let lanes = lanes_for(columns * products * n.pow(3)).min(columns.max(1));
    let width = columns.div_ceil(lanes.max(1)).max(1);
    let ranges: Vec<Range<usize>> = (0..columns)
        .step_by(width)
        .map(|start| start..(start + width).min(columns))
        .collect();
    let parts = in_lanes(ranges, lanes, |group| {
        group
            .into_iter()
            .map(|range| {
                let part = each(&range);
                (range, part)
            })
            .collect::<Vec<_>>()
    });
    let mut stack = vec![0.0; n * n * columns];
    for (range, part) in parts.into_iter().flatten() {
        let len = range.len();
        for entry in 0..n * n {
            stack[entry * columns + range.start..entry * columns + range.end]
                .copy_from_slice(&part[entry * len..(entry + 1) * len]);
        }
    }
    stack
}

/// Each task's vector carried through the segments by the propagators `[segments, tasks, n,
/// n]`: `v <- P_s v` in order, or (`transposed`) `v <- P_s^T v` from the last segment. Returns
/// the vector before each segment's product `[segments, tasks, n]` and the last `[tasks, n]`.
fn carry(
    propagators: &[f32],
    start: &[f32],
    [n, segments, tasks]: [usize; 3],
    transposed: bool,
) -> (Vec<f64>, Vec<f64>) {
    let mut visited = vec![0.0; segments * tasks * n];
    let mut last = Vec::with_capacity(tasks * n);
    for t in 0..tasks {
        let mut v: Vec<f64> = start[t * n..(t + 1) * n]
            .iter()
            .map(|&x| x.into())
            .collect();
        for step in 0..segments {
            let s = if transposed {
                segments - 1 - step
            } else {
                step
            };
            let at = s * tasks + t;
            visited[at * n..(at + 1) * n].copy_from_slice(&v);
            let m = &propagators[at * n * n..(at + 1) * n * n];
            v = (0..n)
                .map(|i| {
                    (0..n)
                        .map(|k| {
                            let entry = if transposed {
                                m[k * n + i]
                            } else {
                                m[i * n + k]
                            };
                            f64::from(entry) * v[k]
                        })
                        .sum()
                })
                .collect();
        }
        last.extend(v);
    }
    (visited, last)
}

/// f64 values rounded to f32.
fn rounded(values: &[f64]) -> Vec<f32> {
    values.iter().map(|&v| v as f32).collect()
}

/// [`crate::ops::QuenchOps::propagate_forward`] on the CPU backend.
pub(crate) fn propagate_forward(
    generators: Tensor<Host, 4>,
    initial: Tensor<Host, 2>,
    polynomial: &SquaredPolynomial,
) -> PropagateTape<Host> {
    let [n, _, segments, tasks] = generators.dims();
    let columns = segments * tasks;
    let x = host_values(generators);
    let stack = over_columns(n, columns, polynomial.products(), |range| {
        polynomial.evaluate(&columns_of(&x, n, columns, range), n, range.len())
    });
    // The tape holds each propagator as a row-major matrix, `[segments, tasks, n, n]`.
    let mut propagators = vec![0.0f32; columns * n * n];
    for (entry, row) in stack.chunks(columns.max(1)).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            propagators[c * n * n + entry] = v as f32;
        }
    }
    let (states, output) = carry(
        &propagators,
        &host_values(initial),
        [n, segments, tasks],
        false,
    );
    PropagateTape {
        propagators: from_values(propagators, [segments, tasks, n, n]),
        states: from_values(rounded(&states), [segments, tasks, n]),
        output: from_values(rounded(&output), [tasks, n]),
    }
}

/// [`crate::ops::QuenchOps::propagate_backward`] on the CPU backend.
pub(crate) fn propagate_backward(
    generators: Tensor<Host, 4>,
    tape: PropagateTape<Host>,
    d_output: Tensor<Host, 2>,
    polynomial: &SquaredPolynomial,
) -> PropagateGradients<Host> {
    let [n, _, segments, tasks] = generators.dims();
    let columns = segments * tasks;
    let x = host_values(generators);
    let entering = host_values(tape.states);
    let (leaving, d_initial) = carry(
        &host_values(tape.propagators),
        &host_values(d_output),
        [n, segments, tasks],
        true,
    );
    // The direction `g w^T` of every segment, batch last.
    let mut direction = vec![0.0; n * n * columns];
    for i in 0..n {
        for j in 0..n {
            for c in 0..columns {
                direction[(i * n + j) * columns + c] =
                    leaving[c * n + i] * f64::from(entering[c * n + j]);
            }
        }
    }
    let d_generators = over_columns(n, columns, 4 * polynomial.products(), |range| {
        let x_t = transpose(&columns_of(&x, n, columns, range), n, range.len());
        let e = columns_of(&direction, n, columns, range);
        polynomial.derivative(&x_t, &e, n, range.len()).1
    });
    PropagateGradients {
        generators: from_values(rounded(&d_generators), [n, n, segments, tasks]),
        initial: from_values(rounded(&d_initial), [tasks, n]),
    }
}
