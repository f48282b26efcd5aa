//! CubeCL kernels of the LSTM layer's time step ([`crate::ops::lstm`]) for every CubeCL
//! runtime: per step one cubek product (the recurrent `h W_h`) and one kernel for the gates'
//! activations and the cell and hidden update, forward; one kernel for the gate gradients and
//! the cell's carried gradient and one product for the hidden state's, backward. The
//! composition takes about fifteen launches a step forward and twenty-five backward. The input
//! projection before the steps and the weight products after them stay the composition's (one
//! batched product each over every step).
//!
//! Design: one unit per `(row, batch, unit j)` of the hidden state. Forward, the unit reads its
//! four gates' pre-activations (projection plus recurrent product) and its previous cell, and
//! writes its four activations, its cell and its hidden value into the tape at its step (each
//! row in its reading order, as the composition stacks them) and its hidden value into the
//! next step's product input: 8 reads and 7 writes per unit and step. Backward, the unit reads
//! its step's activations, cells, output gradient and the carried gradients, and writes its
//! four gate gradients (into the every-step buffer and the step's own, which the recurrent
//! product reads) and its carried cell gradient, in place.
#![allow(clippy::too_many_arguments)]

use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{
    LstmGradients, LstmTape, LstmWeights, StepsInReadingOrder, gradients_from_steps, projection,
    tape_from_steps,
};
use crate::ops::cube::{Cube, elementwise, empty_shaped, from_cube, to_cube};

/// A tensor of the backend.
type Values<R, BT, const D: usize> = burn::tensor::Tensor<Cube<R, BT>, D>;

/// The logistic function.
#[cube]
fn logistic<F: Float>(z: F) -> F {
    F::new(1.0) / (F::new(1.0) + F::exp(F::new(0.0) - z))
}

/// One forward step `step` of unit `ABSOLUTE_POS` = `(row batch) hidden + j`.
#[cube(launch)]
fn lstm_step_kernel<F: Float>(
    projected: &Tensor<F>,
    recurrent: &Tensor<F>,
    gates: &mut Tensor<F>,
    cells: &mut Tensor<F>,
    hiddens: &mut Tensor<F>,
    h_next: &mut Tensor<F>,
    step: u32,
    seq: u32,
    hidden: u32,
    #[define(F)] _dtype: StorageType,
) {
    let position = ABSOLUTE_POS;
    if position >= h_next.len() {
        terminate!();
    }
    let hidden = hidden as usize;
    let step = step as usize;
    let j = position % hidden;
    let row_batch = position / hidden;
    let at = row_batch * seq as usize + step;
    let p = at * 4 * hidden + j;
    let r = row_batch * 4 * hidden + j;
    let i = logistic::<F>(projected[p] + recurrent[r]);
    let f = logistic::<F>(projected[p + hidden] + recurrent[r + hidden]);
    let g = F::tanh(projected[p + 2 * hidden] + recurrent[r + 2 * hidden]);
    let o = logistic::<F>(projected[p + 3 * hidden] + recurrent[r + 3 * hidden]);
    let c_at = at * hidden + j;
    let mut c_prev = F::new(0.0);
    if step > 0 {
        c_prev = cells[c_at - hidden];
    }
    let c = f * c_prev + i * g;
    let h = o * F::tanh(c);
    gates[p] = i;
    gates[p + hidden] = f;
    gates[p + 2 * hidden] = g;
    gates[p + 3 * hidden] = o;
    cells[c_at] = c;
    hiddens[c_at] = h;
    h_next[position] = h;
}

/// One backward step `step` of unit `ABSOLUTE_POS`: the gate gradients, and the cell's
/// carried gradient updated in place.
#[cube(launch)]
fn lstm_step_backward_kernel<F: Float>(
    gates: &Tensor<F>,
    cells: &Tensor<F>,
    d_output: &Tensor<F>,
    dh_next: &Tensor<F>,
    dc_next: &mut Tensor<F>,
    dz_all: &mut Tensor<F>,
    dz_step: &mut Tensor<F>,
    step: u32,
    seq: u32,
    hidden: u32,
    #[define(F)] _dtype: StorageType,
) {
    let position = ABSOLUTE_POS;
    if position >= dc_next.len() {
        terminate!();
    }
    let hidden = hidden as usize;
    let step = step as usize;
    let j = position % hidden;
    let row_batch = position / hidden;
    let at = row_batch * seq as usize + step;
    let a = at * 4 * hidden + j;
    let own = row_batch * 4 * hidden + j;
    let one = F::new(1.0);
    let i = gates[a];
    let f = gates[a + hidden];
    let g = gates[a + 2 * hidden];
    let o = gates[a + 3 * hidden];
    let c_at = at * hidden + j;
    let mut c_prev = F::new(0.0);
    if step > 0 {
        c_prev = cells[c_at - hidden];
    }
    let tc = F::tanh(cells[c_at]);
    let dh = d_output[c_at] + dh_next[position];
    let dc = dc_next[position] + dh * o * (one - tc * tc);
    let dzi = dc * g * i * (one - i);
    let dzf = dc * c_prev * f * (one - f);
    let dzg = dc * i * (one - g * g);
    let dzo = dh * tc * o * (one - o);
    dz_all[a] = dzi;
    dz_all[a + hidden] = dzf;
    dz_all[a + 2 * hidden] = dzg;
    dz_all[a + 3 * hidden] = dzo;
    dz_step[own] = dzi;
    dz_step[own + hidden] = dzf;
    dz_step[own + 2 * hidden] = dzg;
    dz_step[own + 3 * hidden] = dzo;
    dc_next[position] = dc * f;
}

/// [`crate::ops::QuenchOps::lstm_forward`] on a CubeCL backend.
pub(crate) fn lstm_forward<R: CubeRuntime, BT: BoolElement>(
    inputs: Values<R, BT, 4>,
    weights: &LstmWeights<Cube<R, BT>>,
) -> LstmTape<Cube<R, BT>> {
    let [_, batch, seq, _] = inputs.dims();
    let [rows, hidden, gates] = weights.w_h.dims();
    let device = inputs.device();
    let projected = to_cube(projection(inputs.clone(), weights));
    let all_gates = empty_shaped(&projected, [rows, batch, seq, gates]);
    let cells = empty_shaped(&projected, [rows, batch, seq, hidden]);
    let hiddens = empty_shaped(&projected, [rows, batch, seq, hidden]);
    let client = projected.client.clone();
    let dtype = projected.dtype;
    let (count, dim) = elementwise(&client, rows * batch * hidden);
    let mut h = Values::<R, BT, 3>::zeros([rows, batch, hidden], &device);
    for step in 0..seq {
        let recurrent = to_cube(h.matmul(weights.w_h.clone()));
        let h_next = empty_shaped(&projected, [rows, batch, hidden]);
        lstm_step_kernel::launch::<R>(
            &client,
            count.clone(),
            dim,
            projected.clone().into_tensor_arg(),
            recurrent.into_tensor_arg(),
            all_gates.clone().into_tensor_arg(),
            cells.clone().into_tensor_arg(),
            hiddens.clone().into_tensor_arg(),
            h_next.clone().into_tensor_arg(),
            step as u32,
            seq as u32,
            hidden as u32,
            dtype.into(),
        );
        h = from_cube(h_next);
    }
    tape_from_steps(
        inputs,
        from_cube(all_gates),
        from_cube(cells),
        from_cube(hiddens),
    )
}

/// [`crate::ops::QuenchOps::lstm_backward`] on a CubeCL backend.
pub(crate) fn lstm_backward<R: CubeRuntime, BT: BoolElement>(
    weights: &LstmWeights<Cube<R, BT>>,
    tape: LstmTape<Cube<R, BT>>,
    d_output: Values<R, BT, 4>,
) -> LstmGradients<Cube<R, BT>> {
    let [_, batch, seq, _] = tape.inputs.dims();
    let [rows, hidden, gates] = weights.w_h.dims();
    let device = d_output.device();
    let steps = StepsInReadingOrder::new(&tape, d_output);
    let gates_in_order = to_cube(steps.gates);
    let cells = to_cube(steps.cells);
    let dy = to_cube(steps.d_output);
    let dz_all = empty_shaped(&cells, [rows, batch, seq, gates]);
    let dc_next = to_cube(Values::<R, BT, 3>::zeros([rows, batch, hidden], &device));
    let mut dh_next = to_cube(Values::<R, BT, 3>::zeros([rows, batch, hidden], &device));
    let w_h_t = weights.w_h.clone().swap_dims(1, 2);
    let client = cells.client.clone();
    let dtype = cells.dtype;
    let (count, dim) = elementwise(&client, rows * batch * hidden);
    for step in (0..seq).rev() {
        let dz_step = empty_shaped(&cells, [rows, batch, gates]);
        lstm_step_backward_kernel::launch::<R>(
            &client,
            count.clone(),
            dim,
            gates_in_order.clone().into_tensor_arg(),
            cells.clone().into_tensor_arg(),
            dy.clone().into_tensor_arg(),
            dh_next.into_tensor_arg(),
            dc_next.clone().into_tensor_arg(),
            dz_all.clone().into_tensor_arg(),
            dz_step.clone().into_tensor_arg(),
            step as u32,
            seq as u32,
            hidden as u32,
            dtype.into(),
        );
        dh_next = to_cube(from_cube::<R, BT, 3>(dz_step).matmul(w_h_t.clone()));
    }
    gradients_from_steps(weights, tape.inputs, steps.hiddens, from_cube(dz_all))
}
