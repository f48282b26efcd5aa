//! Host kernel of [`crate::ops::circuit`]: each row's circuit run in f64 by
//! [`RealCircuit::expectations`] and [`RealCircuit::gradients`] (the adjoint pass), rows
//! spread over the cores when the work is large, one workspace per lane; results rounded to
//! f32 once. The weights' gradients are written per row, then summed over each member's rows.

use burn::tensor::Tensor;
use quench_host::circuit::{RealCircuit, Row};
use quench_host::lanes::{in_lanes, lanes_for, pieces};
use quench_host::tensor::{Host, from_values, host_values};

use super::CircuitGradients;

/// The sizes of a call: rows, input columns, members, weight columns.
fn sizes(inputs: &Tensor<Host, 2>, weights: &Tensor<Host, 2>) -> [usize; 4] {
    let ([rows, columns], [members, weight_columns]) = (inputs.dims(), weights.dims());
    [rows, columns, members.max(1), weight_columns]
}

/// Lanes for `rows` runs of `program` (a pass over the state per step).
fn lanes(program: &RealCircuit, rows: usize) -> usize {
    lanes_for(rows * program.steps().len() * program.dimension())
}

/// [`crate::ops::QuenchOps::circuit_forward`] on the CPU backend.
pub(crate) fn forward(
    program: &RealCircuit,
    inputs: Tensor<Host, 2>,
    weights: Tensor<Host, 2>,
) -> Tensor<Host, 2> {
    let [rows, columns, members, weight_columns] = sizes(&inputs, &weights);
    let per_member = (rows / members).max(1);
    let (x, w) = (host_values(inputs), host_values(weights));
    let qubits = program.qubits();
    let mut z = vec![0.0f32; rows * qubits];
    let jobs: Vec<_> = z.chunks_mut(qubits).enumerate().collect();
    in_lanes(jobs, lanes(program, rows), |group| {
        let mut workspace = program.workspace();
        for (r, z) in group {
            let m = r / per_member;
            let row = Row {
                inputs: &x[r * columns..(r + 1) * columns],
                weights: &w[m * weight_columns..(m + 1) * weight_columns],
            };
            program.expectations(row, &mut workspace, z);
        }
    });
    from_values(z, [rows, qubits])
}

/// [`crate::ops::QuenchOps::circuit_backward`] on the CPU backend.
pub(crate) fn backward(
    program: &RealCircuit,
    inputs: Tensor<Host, 2>,
    weights: Tensor<Host, 2>,
    d_z: Tensor<Host, 2>,
) -> CircuitGradients<Host> {
    let [rows, columns, members, weight_columns] = sizes(&inputs, &weights);
    let per_member = (rows / members).max(1);
    let (x, w, d_z) = (host_values(inputs), host_values(weights), host_values(d_z));
    let qubits = program.qubits();
    let mut d_x = vec![0.0f32; rows * columns];
    let mut d_w_rows = vec![0.0f32; rows * weight_columns];
    let jobs: Vec<_> = pieces(&mut d_x, rows, columns)
        .into_iter()
        .zip(pieces(&mut d_w_rows, rows, weight_columns))
        .enumerate()
        .collect();
    in_lanes(jobs, lanes(program, rows), |group| {
        let mut workspace = program.workspace();
        for (r, (d_x, d_w)) in group {
            let m = r / per_member;
            let row = Row {
                inputs: &x[r * columns..(r + 1) * columns],
                weights: &w[m * weight_columns..(m + 1) * weight_columns],
            };
            let d_z = &d_z[r * qubits..(r + 1) * qubits];
            program.gradients(row, d_z, &mut workspace, d_x, d_w);
        }
    });
    let mut d_w = vec![0.0f32; members * weight_columns];
    if weight_columns > 0 {
        for (r, row) in d_w_rows.chunks(weight_columns).enumerate() {
            let m = r / per_member;
            let member = &mut d_w[m * weight_columns..(m + 1) * weight_columns];
            member.iter_mut().zip(row).for_each(|(s, v)| *s += v);
        }
    }
    CircuitGradients {
        inputs: from_values(d_x, [rows, columns]),
        weights: from_values(d_w, [members, weight_columns]),
    }
}
