//! `QuenchOps`: the operations Quench adds to Burn's backends, one seam for every device.
//!
//! Each operation is a method of a backend-extension trait (Burn's documented way to add an
//! operation, as in its custom-kernel examples): a default that composes Burn's own tensor
//! ops, which the GPU backends run, and an implementation per backend where a better kernel
//! exists. The autodiff backend implements each one with its own backward pass, so gradients
//! go through the same kernels as values. No caller asks which backend it runs on.
//!
//! Operations:
//! - [`QuenchOps::precise_matmul`]: a matrix product carried in full f32 on every device.
//!   GPU matmul kernels may stage f32 operands as tf32 (cubek's tensor-core strategies do on
//!   CUDA: 11 significant bits, relative errors near 1e-3), which is fine for a network's
//!   weights but not for quantum states compared with an f64 reference. The default splits
//!   each operand into a part exact in tf32 and a remainder and sums three products; the CPU
//!   backend's matmul is exact f32 and is used as it is; a CubeCL backend takes cubek's unit
//!   matmul, which never stages operands in a tensor core's format: one product everywhere.
//! - [`QuenchOps::counter_normals`]: the counter-based normals of [`crate::threefry`], the host
//!   kernel on the CPU backend and integer and float tensor ops elsewhere.
//! - [`QuenchOps::dropout_mask`]: inverted-dropout masks; on the CPU backend a counter-based
//!   stream keyed from Burn's generator, vectorised as the normals are.
//! - [`QuenchOps::dropout_forward`] / [`QuenchOps::dropout_backward`]: inverted dropout with
//!   its mask ([`dropout`]); on the CPU backend the mask made and applied in one pass over the
//!   cores and the gradient multiplied in place, on a CubeCL backend one launch with the key
//!   drawn on the device, Burn's ops elsewhere, one autodiff node.
//! - [`QuenchOps::batch_norm_forward`] / [`QuenchOps::batch_norm_backward`]: batch
//!   normalisation in training mode with an optional ReLU ([`batch_norm`]); host kernels on the
//!   CPU backend, Burn ops elsewhere, one autodiff node.
//! - [`QuenchOps::adam_step`]: the Adam / AdamW update over members of a parameter list with
//!   its moments ([`adam`]); one pass per value on the CPU backend, one launch for the list on
//!   a CubeCL backend, element-wise ops elsewhere.
//! - [`QuenchOps::sgld_step`]: one SGLD step of a batch of one-hidden-layer ReLU networks
//!   on the bounded logistic loss, hand-derived gradients, counter-based noise and update
//!   ([`sgld`]); each chain in one pass on the CPU backend, Burn's ops elsewhere.
//! - [`QuenchOps::conv_patches`]: a convolution in inference (BatchNorm folded, residual,
//!   ReLU) as one patch product, channels last ([`conv`]); the host kernel of `conv::host` on
//!   the CPU backend, a gather kernel, cubek's matmul and an epilogue kernel on a CubeCL
//!   backend, Burn's gather and matmul elsewhere.
//! - [`QuenchOps::lstm_forward`] and [`QuenchOps::lstm_backward`] (and
//!   [`QuenchOps::lstm_inference`], the output alone without a tape): a whole LSTM layer over its
//!   sequence, forward and back ([`lstm`]); the host kernel of `lstm::host` on the CPU
//!   backend in f32, the composition of [`lstm::composed_forward`] elsewhere, and under
//!   autodiff one node whose backward pass is the inner backend's.
//! - [`QuenchOps::dense_forward`] / [`QuenchOps::dense_backward`] (a dense layer with its
//!   activation) and [`QuenchOps::layer_norm_forward`] / [`QuenchOps::layer_norm_backward`],
//!   over a member axis ([`dense`]): host kernels on the CPU backend in f32, Burn ops
//!   elsewhere, one autodiff node each.
//! - [`QuenchOps::attention_forward`] / [`QuenchOps::attention_backward`]: multi-head
//!   scaled dot-product attention with its softmax and optional dropout of the scores
//!   ([`attention`]), on queries, keys and values as dense layers leave them.
//! - [`QuenchOps::weighted_sum`] / [`QuenchOps::weighted_sum_backward`]: attention pooling's
//!   weighted sum over a sequence ([`pooling`]); one pass over the values each way on the CPU
//!   backend, rows over lanes, Burn ops elsewhere, one autodiff node.
//! - [`QuenchOps::select_rows`] and [`QuenchOps::select_ints`]: rows of a table and values of
//!   an integer tensor gathered by index, a loader's batch and its labels ([`rows`]); one copy
//!   per row or value on the CPU backend, Burn's `select` elsewhere.
//! - [`QuenchOps::float_view`]: a reshape that shares the buffer on the CPU backend (whose
//!   own reshape copies every time), used through [`crate::ops::view::ViewTo`].
//!
//! - [`QuenchOps::exact_states`]: the final states of a batch of exact piecewise-constant
//!   evolutions ([`expmv`]), the caller's tensor composition by default, a host kernel
//!   (`expmv`'s Taylor series of matrix-vector products) on the CPU backend without autodiff.
//! - [`QuenchOps::propagate_forward`] / [`QuenchOps::propagate_backward`]: states carried
//!   through piecewise-constant segments whose propagators are a squared polynomial of their
//!   generators (the exact Lindblad solver's under autodiff), with the exact gradients of
//!   both ([`propagate`]); a host kernel in f64 on the CPU backend, four CubeCL kernels, Burn's
//!   batched products elsewhere, one autodiff node.
//! - [`QuenchOps::circuit_forward`] / [`QuenchOps::circuit_backward`]: the `<Z_i>` read-out
//!   of a batch of real quantum circuits whose angles are the rows' inputs and their members'
//!   weights, with the adjoint method's gradients ([`circuit`]); each row in f64 on the CPU
//!   backend, one CubeCL kernel each way, Burn's ops gate by gate elsewhere, one autodiff node.
//! - [`QuenchOps::mlp_train_step`]: a member MLP's training step, backward pass, penalty,
//!   clip and Adam ([`mlp`]); on the CPU backend the backward pass fused with Adam where no
//!   clip needs the whole gradient, the seam's dense and Adam operations elsewhere.
//!
//! [`QuenchOps::host_lanes`] says how many threads a host kernel may split rows over; no
//! caller chooses a path by the backend.

use burn::backend::Autodiff;
use burn::backend::NdArray;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, broadcast_shape};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{Distribution, Int, Shape, Tensor, TensorMetadata, TensorPrimitive};

use crate::ops::random::{dropout_mask_host, normals_host, normals_tensor};
use crate::readback::float_tensor;
use crate::threefry::StreamKey;

pub mod adam;
pub mod attention;
pub mod batch_norm;
#[cfg(test)]
mod binding_limit;
pub mod circuit;
pub mod conv;
#[cfg(any(feature = "cuda", feature = "wgpu"))]
mod cube;
pub mod dense;
pub mod dropout;
pub mod expmv;
pub mod lstm;
pub mod mlp;
pub mod pooling;
pub mod propagate;
pub mod random;
pub mod rows;
pub mod sgld;
pub mod view;
pub mod zeros;

use adam::{AdamConfig, AdamStep};
use attention::{AttentionGradients, AttentionInputs, AttentionOutput};
use batch_norm::{BatchNormTape, BatchNormed};
use circuit::{CircuitGradients, RealCircuit};
use conv::{ConvAffine, PatchRows};
use dense::{Activation, DenseGradients, DenseOutput, NormGradients, NormTape, Normed};
use dropout::Dropped;
use expmv::ExactStates;
use lstm::{LstmGradients, LstmTape, LstmWeights};
use mlp::{MlpObjective, MlpStep, MlpStepped, MlpTape};
use pooling::PoolGradients;
use propagate::{PropagateGradients, PropagateTape, SquaredPolynomial};
use sgld::SgldStep;

/// Operations Quench adds to a Burn backend; see the module documentation.
pub trait QuenchOps: Backend {
    /// The batched matrix product `lhs @ rhs` (Burn's `matmul` rules: the last two axes
    /// multiply, leading axes broadcast), every operand entry carried in full f32: relative
    /// error near f32's epsilon times the inner size on every device. Shapes as
    /// `Tensor::matmul`: `[.., n, k] @ [.., k, m] -> [.., n, m]`.
    fn precise_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        split_matmul::<Self>(lhs, rhs, Self::float_matmul)
    }

    /// `tensor`'s elements in row-major order as a tensor of `shape` (as many elements): a
    /// view without a copy on the CPU backend, whose own reshape (burn-ndarray 0.21) copies
    /// every time; elsewhere Burn's reshape, through the flat tensor when the rank changes
    /// ([`crate::views`]: CubeCL's reshape mis-strides otherwise). Under autodiff one node
    /// whose gradient is the same view back.
    fn float_view(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        if crate::views::through_flat(tensor.shape().num_dims(), shape.num_dims()) {
            let elements = tensor.shape().num_elements();
            let flat = Self::float_reshape(tensor, Shape::new([elements]));
            Self::float_reshape(flat, shape)
        } else {
            Self::float_reshape(tensor, shape)
        }
    }

    /// Rows `index` `[k]` of `table` `[rows, width]`, in the index's order: `[k, width]`
    /// ([`rows`]). The default is Burn's `select` along the first axis.
    fn select_rows(table: Tensor<Self, 2>, index: Tensor<Self, 1, Int>) -> Tensor<Self, 2> {
        table.select(0, index)
    }

    /// Values `index` `[k]` of the integers `values` `[n]` (a loader's labels), in the index's
    /// order: `[k]` ([`rows`]). The default is Burn's `select`.
    fn select_ints(
        values: Tensor<Self, 1, Int>,
        index: Tensor<Self, 1, Int>,
    ) -> Tensor<Self, 1, Int> {
        values.select(0, index)
    }

    /// A tensor of `shape` holding zeros ([`zeros`]): on the CPU backend written once in
    /// place, where burn-ndarray's `zeros` fills a buffer and copies it. The default is Burn's
    /// `zeros`.
    fn zeros<const D: usize>(shape: [usize; D], device: &Self::Device) -> Tensor<Self, D> {
        Tensor::zeros(shape, device)
    }

    /// Draw `draw` of each member's counter-based normal stream (Threefry-2x32-20 and
    /// Box-Muller, [`crate::threefry`]), `[keys.len(), len]`: the same values on every
    /// backend. The default composes integer and float tensor ops on the device.
    fn counter_normals(
        keys: &[StreamKey],
        draw: u64,
        len: usize,
        device: &Self::Device,
    ) -> FloatTensor<Self> {
        normals_tensor::<Self>(keys, draw, len, device)
            .into_primitive()
            .tensor()
    }

    /// An inverted-dropout mask `[..shape]` at `rate`: each value independently `1 / (1 -
    /// rate)` with probability `1 - rate`, else 0, from the backend's seeded generator (a
    /// [`crate::SeededGenerator`] makes the masks reproducible). The default is Burn's
    /// Bernoulli draw on the device.
    fn dropout_mask<const D: usize>(
        shape: Shape,
        rate: f64,
        device: &Self::Device,
    ) -> Tensor<Self, D> {
        let keep = kept_fraction(rate);
        if keep == 0.0 {
            return Tensor::zeros(shape, device);
        }
        Tensor::random(shape, Distribution::Bernoulli(keep), device).div_scalar(keep)
    }

    /// Inverted dropout of `h` at `rate` ([`dropout::dropout`]): `h` times a fresh
    /// [`QuenchOps::dropout_mask`] in `h`'s precision, with the mask for the backward pass.
    fn dropout_forward<const D: usize>(h: Tensor<Self, D>, rate: f64) -> Dropped<Self, D> {
        dropout::composed_dropout(h, rate)
    }

    /// Dropout's input gradient from its output's gradient `dy` and the forward pass's mask:
    /// `dy mask`, both consumed (the CPU backend's host kernel gives the mask's buffer back).
    fn dropout_backward<const D: usize>(
        dy: Tensor<Self, D>,
        mask: Tensor<Self, D>,
    ) -> Tensor<Self, D> {
        dy * mask
    }

    /// Batch normalisation in training mode per member, ReLU after it where `rectify`
    /// ([`batch_norm`]): `x` `[members, rows, channels]`, `gamma`, `beta` `[members, 1,
    /// channels]`; the output, the batch statistics and what the backward pass needs.
    fn batch_norm_forward(
        x: Tensor<Self, 3>,
        gamma: &Tensor<Self, 3>,
        beta: &Tensor<Self, 3>,
        eps: f64,
        rectify: bool,
    ) -> BatchNormed<Self> {
        batch_norm::composed_batch_norm(x, gamma, beta, eps, rectify)
    }

    /// The batch normalisation's gradients from its tape and the output's gradient `dy`.
    fn batch_norm_backward(
        tape: &BatchNormTape<Self>,
        gamma: &Tensor<Self, 3>,
        dy: Tensor<Self, 3>,
    ) -> NormGradients<Self> {
        batch_norm::composed_batch_norm_backward(tape, gamma, dy)
    }

    /// The per-member coefficients of an Adam step after `steps` `[members, 1, 1]` at learning
    /// rates `lr` (`[members, 1, 1]` or `[1, 1, 1]`), each `[members, 1, 1]`: `lr / (1 -
    /// beta1^t)`, `sqrt(1 - beta2^t)` (the bias corrections to a few f32 roundings for every
    /// `t`, as PyTorch's f64 ones; guarded at 1e-12 for `t = 0`) and, where the step decays
    /// ([`AdamConfig::decays`]), `1 - lr wd`; no `active` mask. The default composes about
    /// sixty element-wise ops ([`adam::composed_coefficients`]).
    fn adam_coefficients(
        config: AdamConfig,
        steps: Tensor<Self, 3>,
        lr: Tensor<Self, 3>,
    ) -> AdamStep<Self> {
        adam::composed_coefficients(config, steps, lr)
    }

    /// One Adam or AdamW step over members ([`adam`]) of every parameter of `params` with its
    /// gradient in `grads` and its moments `[m, v]` in `moments` (each `[members, rows,
    /// cols]`, in the same order), with the step's per-member coefficients (members outside
    /// `step.active` unchanged): the updated parameters and moments. The default composes
    /// about thirteen element-wise ops per parameter ([`adam::composed_steps`]).
    fn adam_step(
        config: AdamConfig,
        params: Vec<Tensor<Self, 3>>,
        grads: Vec<Tensor<Self, 3>>,
        moments: Vec<[Tensor<Self, 3>; 2]>,
        step: &AdamStep<Self>,
    ) -> adam::Stepped<Self> {
        adam::composed_steps(config, params, grads, moments, step)
    }

    /// One SGLD step of a batch of `inputs -> hidden -> 1` ReLU networks on the bounded
    /// logistic loss ([`sgld`]): `params` (weight, bias, output weight, output bias, each
    /// `[chains, ..]`), the chains' minibatches `features` `[chains, batch, inputs]` and
    /// `labels` `[chains, batch, 1]`, to the updated parameters. An optimiser's step: callers
    /// run it on a backend without autodiff (an autodiff backend runs the default
    /// composition).
    fn sgld_step(
        params: [Tensor<Self, 3>; 4],
        features: Tensor<Self, 3>,
        labels: Tensor<Self, 3>,
        step: &SgldStep<'_, Self>,
    ) -> [Tensor<Self, 3>; 4] {
        sgld::composed_step(params, features, labels, step)
    }

    /// A convolution in inference as one patch product ([`conv`]):
    /// `act(patches(x) W * scale + shift [+ residual])` for `x` `[batch, positions,
    /// channels]` (channels last), to `[batch, cells, out]`; `rectify` applies ReLU. Under
    /// autodiff the composition's gradients.
    fn conv_patches(
        x: Tensor<Self, 3>,
        patches: &PatchRows,
        conv: &ConvAffine<Self>,
        residual: Option<Tensor<Self, 3>>,
        rectify: bool,
    ) -> Tensor<Self, 3> {
        conv::composed_conv(x, patches, conv, residual, rectify)
    }

    /// A whole bidirectional LSTM layer forward ([`lstm`]): `inputs` `[members, batch, seq,
    /// input]` to the tape whose `output` `[members, batch, seq, 2 hidden]` is the layer's.
    /// `lanes`: threads a host kernel may spread the `2 members` rows over.
    fn lstm_forward(
        inputs: Tensor<Self, 4>,
        weights: &LstmWeights<Self>,
        lanes: usize,
    ) -> LstmTape<Self> {
        let _ = lanes;
        lstm::composed_forward(inputs, weights)
    }

    /// The layer's output alone (`[members, batch, seq, 2 hidden]`), for a pass that needs
    /// no backward one: the CPU's host kernel keeps no tape. The default, for every other
    /// backend, is the taped forward's output: gradients still flow under autodiff, and a
    /// CubeCL device computes the tape and drops it.
    fn lstm_inference(
        inputs: Tensor<Self, 4>,
        weights: &LstmWeights<Self>,
        lanes: usize,
    ) -> Tensor<Self, 4> {
        Self::lstm_forward(inputs, weights, lanes).output
    }

    /// The layer's backward pass from its output's gradient `d_output` `[members, batch, seq,
    /// 2 hidden]` and the tape [`QuenchOps::lstm_forward`] kept, consumed (the CPU's host kernel
    /// recycles its buffers).
    fn lstm_backward(
        weights: &LstmWeights<Self>,
        tape: LstmTape<Self>,
        d_output: Tensor<Self, 4>,
        lanes: usize,
    ) -> LstmGradients<Self> {
        let _ = lanes;
        lstm::composed_backward(weights, &tape, d_output)
    }

    /// `activation(x W + b)` per member ([`dense::dense`]): `x` `[members, rows, fan_in]`,
    /// `weight` `[members, fan_in, fan_out]`, `bias` `[members, 1, fan_out]`, to `[members,
    /// rows, fan_out]`, with what the backward pass needs.
    fn dense_forward(
        x: Tensor<Self, 3>,
        weight: &Tensor<Self, 3>,
        bias: &Tensor<Self, 3>,
        activation: Option<Activation>,
    ) -> DenseOutput<Self> {
        dense::composed_dense(x, weight, bias, activation)
    }

    /// The dense layer's gradients from its input `x`, `weight`, what the forward pass kept
    /// and the output's gradient `dy` `[members, rows, fan_out]`; `x`, `kept` and `dy` are
    /// consumed (the CPU's host kernel recycles the buffers nothing else holds).
    fn dense_backward(
        x: Tensor<Self, 3>,
        weight: &Tensor<Self, 3>,
        kept: Tensor<Self, 3>,
        dy: Tensor<Self, 3>,
        activation: Option<Activation>,
    ) -> DenseGradients<Self> {
        dense::composed_dense_backward(x, weight, kept, dy, activation)
    }

    /// Layer normalisation over the last axis per member ([`dense::layer_norm`]): `x`
    /// `[members, rows, width]`, `gamma`, `beta` `[members, 1, width]`; the output and what
    /// the backward pass needs.
    fn layer_norm_forward(
        x: Tensor<Self, 3>,
        gamma: &Tensor<Self, 3>,
        beta: &Tensor<Self, 3>,
        eps: f64,
    ) -> Normed<Self> {
        dense::composed_layer_norm(x, gamma, beta, eps)
    }

    /// Layer normalisation's gradients from its tape, `gamma` and the output's gradient; the
    /// tape and `dy` are consumed (the CPU's host kernel gives the normalised rows' and `dy`'s
    /// buffers back to its pool where nothing else holds them).
    fn layer_norm_backward(
        tape: NormTape<Self>,
        gamma: &Tensor<Self, 3>,
        dy: Tensor<Self, 3>,
    ) -> NormGradients<Self> {
        dense::composed_layer_norm_backward(&tape, gamma, dy)
    }

    /// Attention pooling's weighted sum over a sequence ([`pooling::weighted_sum`]): `values`
    /// `[rows, seq, width]` and `weights` `[rows, seq]` to `[rows, width]`.
    fn weighted_sum(values: Tensor<Self, 3>, weights: Tensor<Self, 2>) -> Tensor<Self, 2> {
        pooling::composed_weighted_sum(values, weights)
    }

    /// The weighted sum's gradients from the pooled output's gradient `grad` `[rows, width]`.
    fn weighted_sum_backward(
        values: &Tensor<Self, 3>,
        weights: &Tensor<Self, 2>,
        grad: Tensor<Self, 2>,
    ) -> PoolGradients<Self> {
        pooling::composed_weighted_sum_backward(values, weights, grad)
    }

    /// Multi-head scaled dot-product attention ([`attention::attention`]): the context
    /// `[groups, seq, heads d_k]` and the softmax's weights `[groups, heads, seq, seq]`.
    fn attention_forward(inputs: &AttentionInputs<Self>) -> AttentionOutput<Self> {
        attention::composed_attention(inputs)
    }

    /// The attention's gradients from its inputs, the weights and the context's gradient, all
    /// consumed (the CPU's host kernel recycles the buffers nothing else holds).
    fn attention_backward(
        inputs: AttentionInputs<Self>,
        weights: Tensor<Self, 4>,
        d_context: Tensor<Self, 3>,
    ) -> AttentionGradients<Self> {
        attention::composed_attention_backward(&inputs, &weights, d_context)
    }

    /// One training step of a member MLP ([`mlp`]): the backward pass from `objective` at
    /// the output of the pass that made `tape` (consumed), the step's L1 penalty and
    /// per-member clip, and Adam on every parameter of `params` (weight `[members, fan_in,
    /// fan_out]` then bias `[members, 1, fan_out]` per layer) with its `moments`; members
    /// outside `step.coefficients.active` unchanged. An optimiser's step: callers run it on
    /// a backend without autodiff (an autodiff backend runs the default composition).
    fn mlp_train_step(
        step: &MlpStep<'_, Self>,
        params: Vec<Tensor<Self, 3>>,
        moments: Vec<[Tensor<Self, 3>; 2]>,
        tape: MlpTape<Self>,
        objective: MlpObjective<Self>,
    ) -> MlpStepped<Self> {
        mlp::composed_train_step(step, params, moments, tape, objective)
    }

    /// `<Z_i>` `[rows, qubits]` of `program` on every row of `inputs` `[rows, columns]` with
    /// its member's `weights` `[members, weight columns]` ([`circuit`]).
    fn circuit_forward(
        program: &RealCircuit,
        inputs: Tensor<Self, 2>,
        weights: Tensor<Self, 2>,
    ) -> Tensor<Self, 2> {
        circuit::composed_forward(program, inputs, weights)
    }

    /// The gradients with respect to a circuit read-out's inputs and weights, given the
    /// gradient `d_z` `[rows, qubits]` with respect to the read-out.
    fn circuit_backward(
        program: &RealCircuit,
        inputs: Tensor<Self, 2>,
        weights: Tensor<Self, 2>,
        d_z: Tensor<Self, 2>,
    ) -> CircuitGradients<Self> {
        circuit::composed_backward(program, inputs, weights, d_z)
    }

    /// `initial` `[tasks, n]` carried through the segments of `generators` `[n, n, segments,
    /// tasks]`, each by its propagator `r(X_s)` of `polynomial` ([`propagate`]), with what
    /// the backward pass needs.
    fn propagate_forward(
        generators: Tensor<Self, 4>,
        initial: Tensor<Self, 2>,
        polynomial: &SquaredPolynomial,
    ) -> PropagateTape<Self> {
        propagate::composed_forward(generators, initial, polynomial)
    }

    /// The gradients with respect to a propagation's generators and initial states, given the
    /// gradient `d_output` `[tasks, n]` with respect to its final states.
    fn propagate_backward(
        generators: Tensor<Self, 4>,
        tape: PropagateTape<Self>,
        d_output: Tensor<Self, 2>,
        polynomial: &SquaredPolynomial,
    ) -> PropagateGradients<Self> {
        propagate::composed_backward(generators, tape, d_output, polynomial)
    }

    /// The final states `[tasks, n]` of a batch of exact piecewise-constant evolutions
    /// ([`expmv`]); `composed` is the caller's composition in tensor ops, which the default
    /// runs (and through which autodiff differentiates).
    fn exact_states<'a>(
        input: ExactStates<'a, Self>,
        composed: impl FnOnce(ExactStates<'a, Self>) -> Tensor<Self, 2>,
    ) -> Tensor<Self, 2> {
        composed(input)
    }

    /// Threads a computation may split independent rows over: the cores available to the
    /// process where each op runs on the calling thread (the CPU backend in f32, with or
    /// without autodiff, whose host kernels take a lane count); 1 where ops are queued to a
    /// device asynchronously.
    fn host_lanes() -> usize {
        1
    }
}

/// A backend Quench runs on: autodiff over an inner backend, both with [`QuenchOps`].
pub trait QuenchBackend: AutodiffBackend<InnerBackend: QuenchOps> + QuenchOps {}

impl<B> QuenchBackend for B where B: AutodiffBackend<InnerBackend: QuenchOps> + QuenchOps {}

/// [`QuenchOps::precise_matmul`] on tensors.
pub fn precise_matmul<B: QuenchOps, const D: usize>(
    lhs: Tensor<B, D>,
    rhs: Tensor<B, D>,
) -> Tensor<B, D> {
    let product = B::precise_matmul(lhs.into_primitive().tensor(), rhs.into_primitive().tensor());
    Tensor::from_primitive(TensorPrimitive::Float(product))
}

/// Veltkamp's splitting constant for tf32: `x * (2^13 + 1)` then `c - (c - x)` keeps the
/// leading 24 - 13 = 11 significant bits of an f32, exactly as many as tf32 holds.
const TF32_SPLITTER: f64 = 8193.0;

/// `x = high + low` with `high` exact in tf32 (11 significant bits) and `low` the f32
/// remainder (at most 13 significant bits, so tf32 rounds it by at most 2^-22 of `x`). Each
/// step is its own kernel: nothing may reassociate `c - (c - x)`.
fn split<B: Backend>(x: FloatTensor<B>) -> (FloatTensor<B>, FloatTensor<B>) {
    let scaled = B::float_mul_scalar(x.clone(), TF32_SPLITTER.into());
    let high = B::float_sub(scaled.clone(), B::float_sub(scaled, x.clone()));
    let low = B::float_sub(x, high.clone());
    (high, low)
}

/// `lhs @ rhs` as `hl hr + (hl lr + ll hr)` from the operands' tf32 splits, each of the three
/// products taken by `product` (a matmul that may round its operands to tf32 but accumulates
/// in f32). The dropped `ll lr` is below 2^-22 of the product; small terms are summed first.
pub(crate) fn split_matmul<B: Backend>(
    lhs: FloatTensor<B>,
    rhs: FloatTensor<B>,
    product: impl Fn(FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>,
) -> FloatTensor<B> {
    let (lhs_high, lhs_low) = split::<B>(lhs);
    let (rhs_high, rhs_low) = split::<B>(rhs);
    let corrections = B::float_add(
        product(lhs_high.clone(), rhs_low),
        product(lhs_low, rhs_high.clone()),
    );
    B::float_add(product(lhs_high, rhs_high), corrections)
}

/// Whether the attention's host kernel takes these inputs (`attention::host::fits`).
fn host_fits(inputs: &AttentionInputs<NdArray<f32>>) -> bool {
    let mask = inputs.mask.as_ref().map(|m| m.dims());
    let q = inputs.q.dims();
    // The kernel reads k and v with q's sizes; other shapes (keys of another length) take the
    // composition, which runs them or refuses them with Burn's shape error.
    inputs.k.dims() == q
        && inputs.v.dims() == q
        && crate::ops::attention::host::fits(&q, inputs.heads, mask.as_ref().map(|m| &m[..]))
}

/// A float tensor's primitive, for the host kernels.
fn host_primitive(t: Tensor<NdArray<f32>, 3>) -> FloatTensor<NdArray<f32>> {
    t.into_primitive().tensor()
}

/// The fraction a dropout mask at `rate` keeps, `1 - rate`.
///
/// # Panics
/// If `rate` is outside `[0, 1]` (callers' settings validate it first).
fn kept_fraction(rate: f64) -> f64 {
    assert!(
        (0.0..=1.0).contains(&rate),
        "dropout rate {rate} outside [0, 1]"
    );
    1.0 - rate
}

/// A dropout mask's stream key: two words from Burn's generator on the CPU backend (a
/// [`crate::SeededGenerator`] makes them reproducible).
fn mask_key(device: &burn::backend::ndarray::NdArrayDevice) -> StreamKey {
    let words = Tensor::<NdArray<f32>, 1, Int>::random(
        [2],
        Distribution::Uniform(0.0, f64::from(u32::MAX) + 1.0),
        device,
    )
    .into_data();
    let mut key = [0u32; 2];
    for (k, w) in key.iter_mut().zip(words.iter::<i64>()) {
        *k = w as u32;
    }
    StreamKey(key)
}

/// A host kernel's result as a tensor.
fn from_host<const D: usize>(t: FloatTensor<NdArray<f32>>) -> Tensor<NdArray<f32>, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// The CPU backend in f32: burn-ndarray's matmul multiplies in full precision already, and
/// the host kernels take the place of tensor-op compositions.
impl QuenchOps for NdArray<f32> {
    fn precise_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_matmul(lhs, rhs)
    }

    fn float_view(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        quench_host::tensor::view(tensor, shape)
    }

    fn select_rows(table: Tensor<Self, 2>, index: Tensor<Self, 1, Int>) -> Tensor<Self, 2> {
        rows::host::select_rows(table, index)
    }

    fn select_ints(
        values: Tensor<Self, 1, Int>,
        index: Tensor<Self, 1, Int>,
    ) -> Tensor<Self, 1, Int> {
        rows::host::select_ints(values, index)
    }

    fn zeros<const D: usize>(shape: [usize; D], _device: &Self::Device) -> Tensor<Self, D> {
        // Written once, in place (see `zeros` for why not `calloc`).
        let mut values = Vec::new();
        values.resize(shape.iter().product(), 0.0);
        quench_host::tensor::from_values(values, shape)
    }

    fn counter_normals(
        keys: &[StreamKey],
        draw: u64,
        len: usize,
        device: &Self::Device,
    ) -> FloatTensor<Self> {
        float_tensor::<Self, f32, 2>(normals_host(keys, draw, len), [keys.len(), len], device)
            .into_primitive()
            .tensor()
    }

    fn batch_norm_forward(
        x: Tensor<Self, 3>,
        gamma: &Tensor<Self, 3>,
        beta: &Tensor<Self, 3>,
        eps: f64,
        rectify: bool,
    ) -> BatchNormed<Self> {
        let [output, normed, mean, var, inv_std] =
            crate::ops::batch_norm::host::batch_norm_forward(
                host_primitive(x),
                host_primitive(gamma.clone()),
                host_primitive(beta.clone()),
                eps,
                rectify,
            )
            .map(from_host);
        BatchNormed {
            output: output.clone(),
            mean,
            var,
            tape: BatchNormTape {
                normed,
                inv_std,
                rectified: rectify.then_some(output),
            },
        }
    }

    fn batch_norm_backward(
        tape: &BatchNormTape<Self>,
        gamma: &Tensor<Self, 3>,
        dy: Tensor<Self, 3>,
    ) -> NormGradients<Self> {
        let [x, gamma, beta] = crate::ops::batch_norm::host::batch_norm_backward(
            [tape.normed.clone(), tape.inv_std.clone()].map(host_primitive),
            tape.rectified.clone().map(host_primitive),
            host_primitive(gamma.clone()),
            host_primitive(dy),
        )
        .map(from_host);
        NormGradients { x, gamma, beta }
    }

    /// The coefficients read back (free on the host), then each chain's step in one pass.
    fn sgld_step(
        params: [Tensor<Self, 3>; 4],
        features: Tensor<Self, 3>,
        labels: Tensor<Self, 3>,
        step: &SgldStep<'_, Self>,
    ) -> [Tensor<Self, 3>; 4] {
        let batch = features.dims()[1];
        let [drift, noise] =
            [&step.drift, &step.noise].map(|t| crate::readback::to_host_f32(t.clone()));
        let constants = crate::ops::sgld::host::Constants {
            floor: step.floor as f32,
            per_sample: (step.factor / batch.max(1) as f64) as f32,
            inv_var: step.inv_var as f32,
            draw: step.draw,
        };
        crate::ops::sgld::host::sgld_step(
            params.map(host_primitive),
            host_primitive(features),
            host_primitive(labels),
            [&drift, &noise],
            step.keys,
            constants,
        )
        .map(from_host)
    }

    /// In f64 on the host from the counts and rates read back (free there)
    /// ([`adam::host::coefficients`]).
    fn adam_coefficients(
        config: AdamConfig,
        steps: Tensor<Self, 3>,
        lr: Tensor<Self, 3>,
    ) -> AdamStep<Self> {
        let device = steps.device();
        let [steps, lr] = [steps, lr].map(crate::readback::to_host_f32);
        let (step_size, root_correction, decay) =
            crate::ops::adam::host::coefficients(config, &steps, &lr);
        let members = step_size.len();
        let column = |values| float_tensor::<Self, f32, 3>(values, [members, 1, 1], &device);
        AdamStep {
            step_size: column(step_size),
            root_correction: column(root_correction),
            decay: decay.map(column),
            active: None,
        }
    }

    /// The coefficients read back once (free on the host), then one pass per value.
    fn adam_step(
        config: AdamConfig,
        params: Vec<Tensor<Self, 3>>,
        grads: Vec<Tensor<Self, 3>>,
        moments: Vec<[Tensor<Self, 3>; 2]>,
        step: &AdamStep<Self>,
    ) -> adam::Stepped<Self> {
        let members = params.first().map_or(0, |p| p.dims()[0]);
        let updates = crate::ops::adam::host::updates(config, step, members);
        adam::step_each(params, grads, moments, |p, g, moments| {
            crate::ops::adam::host::adam_step(
                p.into_primitive().tensor(),
                g.into_primitive().tensor(),
                moments.map(|t| t.into_primitive().tensor()),
                &updates,
            )
            .map(from_host)
        })
    }

    fn mlp_train_step(
        step: &MlpStep<'_, Self>,
        params: Vec<Tensor<Self, 3>>,
        moments: Vec<[Tensor<Self, 3>; 2]>,
        tape: MlpTape<Self>,
        objective: MlpObjective<Self>,
    ) -> MlpStepped<Self> {
        mlp::host::train_step(step, params, moments, tape, objective)
    }

    fn conv_patches(
        x: Tensor<Self, 3>,
        patches: &PatchRows,
        conv: &ConvAffine<Self>,
        residual: Option<Tensor<Self, 3>>,
        rectify: bool,
    ) -> Tensor<Self, 3> {
        let primitive = |t: Tensor<Self, 1>| t.into_primitive().tensor();
        from_host(crate::ops::conv::host::conv_patches(
            x.into_primitive().tensor(),
            patches,
            [
                conv.weight.clone().into_primitive().tensor(),
                primitive(conv.scale.clone()),
                primitive(conv.shift.clone()),
            ],
            residual.map(|r| r.into_primitive().tensor()),
            rectify,
        ))
    }

    /// One 64-bit key per mask from Burn's generator, then the counter-based stream's host
    /// kernel: Burn's own draw goes value by value through ChaCha, which was a quarter of a
    /// Transformer epoch.
    fn dropout_mask<const D: usize>(
        shape: Shape,
        rate: f64,
        device: &Self::Device,
    ) -> Tensor<Self, D> {
        let keep = kept_fraction(rate);
        let mask = dropout_mask_host(mask_key(device), shape.num_elements(), keep);
        float_tensor::<Self, f32, D>(mask, shape.dims(), device)
    }

    /// The mask of [`QuenchOps::dropout_mask`] for the same generator state, made and applied
    /// in one pass per piece over the cores.
    fn dropout_forward<const D: usize>(h: Tensor<Self, D>, rate: f64) -> Dropped<Self, D> {
        let keep = kept_fraction(rate);
        let key = mask_key(&h.device());
        let [output, mask] =
            dropout::host::forward::<D>(h.into_primitive().tensor(), key, keep).map(from_host);
        Dropped { output, mask }
    }

    fn dropout_backward<const D: usize>(
        dy: Tensor<Self, D>,
        mask: Tensor<Self, D>,
    ) -> Tensor<Self, D> {
        from_host(dropout::host::backward::<D>(
            dy.into_primitive().tensor(),
            mask.into_primitive().tensor(),
        ))
    }

    fn lstm_forward(
        inputs: Tensor<Self, 4>,
        weights: &LstmWeights<Self>,
        lanes: usize,
    ) -> LstmTape<Self> {
        let primitive = |t: Tensor<Self, 3>| t.into_primitive().tensor();
        let (inputs, [gates, cells, output]) = crate::ops::lstm::host::forward(
            inputs.into_primitive().tensor(),
            primitive(weights.w_x.clone()),
            primitive(weights.w_h.clone()),
            primitive(weights.bias.clone()),
            lanes,
        );
        let tensor = |t| Tensor::from_primitive(TensorPrimitive::Float(t));
        LstmTape {
            inputs: tensor(inputs),
            gates: tensor(gates),
            cells: tensor(cells),
            output: tensor(output),
        }
    }

    fn lstm_inference(
        inputs: Tensor<Self, 4>,
        weights: &LstmWeights<Self>,
        lanes: usize,
    ) -> Tensor<Self, 4> {
        let primitive = |t: Tensor<Self, 3>| t.into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(crate::ops::lstm::host::inference(
            inputs.into_primitive().tensor(),
            primitive(weights.w_x.clone()),
            primitive(weights.w_h.clone()),
            primitive(weights.bias.clone()),
            lanes,
        )))
    }

    fn lstm_backward(
        weights: &LstmWeights<Self>,
        tape: LstmTape<Self>,
        d_output: Tensor<Self, 4>,
        lanes: usize,
    ) -> LstmGradients<Self> {
        let tape =
            [tape.inputs, tape.gates, tape.cells, tape.output].map(|t| t.into_primitive().tensor());
        let [w_x, w_h, bias, inputs] = crate::ops::lstm::host::backward(
            tape,
            weights.w_x.clone().into_primitive().tensor(),
            weights.w_h.clone().into_primitive().tensor(),
            d_output.into_primitive().tensor(),
            lanes,
        );
        LstmGradients {
            w_x: Tensor::from_primitive(TensorPrimitive::Float(w_x)),
            w_h: Tensor::from_primitive(TensorPrimitive::Float(w_h)),
            bias: Tensor::from_primitive(TensorPrimitive::Float(bias)),
            inputs: Tensor::from_primitive(TensorPrimitive::Float(inputs)),
        }
    }

    fn dense_forward(
        x: Tensor<Self, 3>,
        weight: &Tensor<Self, 3>,
        bias: &Tensor<Self, 3>,
        activation: Option<Activation>,
    ) -> DenseOutput<Self> {
        let [x, weight, bias] = [x, weight.clone(), bias.clone()].map(host_primitive);
        let [output, kept] =
            crate::ops::dense::host::dense_forward(x, weight, bias, activation).map(from_host);
        DenseOutput { output, kept }
    }

    fn dense_backward(
        x: Tensor<Self, 3>,
        weight: &Tensor<Self, 3>,
        kept: Tensor<Self, 3>,
        dy: Tensor<Self, 3>,
        activation: Option<Activation>,
    ) -> DenseGradients<Self> {
        let [x, weight, kept, dy] = [x, weight.clone(), kept, dy].map(host_primitive);
        let [x, weight, bias] =
            crate::ops::dense::host::dense_backward(x, weight, kept, dy, activation).map(from_host);
        DenseGradients { x, weight, bias }
    }

    fn layer_norm_forward(
        x: Tensor<Self, 3>,
        gamma: &Tensor<Self, 3>,
        beta: &Tensor<Self, 3>,
        eps: f64,
    ) -> Normed<Self> {
        let [x, gamma, beta] = [x, gamma.clone(), beta.clone()].map(host_primitive);
        let [y, normed, inv_std] =
            crate::ops::dense::host::layer_norm_forward(x, gamma, beta, eps).map(from_host);
        (y, NormTape { normed, inv_std })
    }

    fn layer_norm_backward(
        tape: NormTape<Self>,
        gamma: &Tensor<Self, 3>,
        dy: Tensor<Self, 3>,
    ) -> NormGradients<Self> {
        let [normed, inv_std, gamma, dy] =
            [tape.normed, tape.inv_std, gamma.clone(), dy].map(host_primitive);
        let [x, gamma, beta] =
            crate::ops::dense::host::layer_norm_backward(normed, inv_std, gamma, dy).map(from_host);
        NormGradients { x, gamma, beta }
    }

    fn weighted_sum(values: Tensor<Self, 3>, weights: Tensor<Self, 2>) -> Tensor<Self, 2> {
        from_host(crate::ops::pooling::host::weighted_sum(
            values.into_primitive().tensor(),
            weights.into_primitive().tensor(),
        ))
    }

    fn weighted_sum_backward(
        values: &Tensor<Self, 3>,
        weights: &Tensor<Self, 2>,
        grad: Tensor<Self, 2>,
    ) -> PoolGradients<Self> {
        let [values, weights] = crate::ops::pooling::host::weighted_sum_backward(
            values.clone().into_primitive().tensor(),
            weights.clone().into_primitive().tensor(),
            grad.into_primitive().tensor(),
        );
        PoolGradients {
            values: from_host(values),
            weights: from_host(weights),
        }
    }

    fn attention_forward(inputs: &AttentionInputs<Self>) -> AttentionOutput<Self> {
        if !host_fits(inputs) {
            return attention::composed_attention(inputs);
        }
        let qkv = [&inputs.q, &inputs.k, &inputs.v].map(|t| host_primitive(t.clone()));
        let mask = inputs.mask.clone().map(|m| m.into_primitive().tensor());
        let [context, weights] = crate::ops::attention::host::forward(qkv, mask, inputs.heads);
        AttentionOutput {
            context: from_host(context),
            weights: from_host(weights),
        }
    }

    fn attention_backward(
        inputs: AttentionInputs<Self>,
        weights: Tensor<Self, 4>,
        d_context: Tensor<Self, 3>,
    ) -> AttentionGradients<Self> {
        if !host_fits(&inputs) {
            return attention::composed_attention_backward(&inputs, &weights, d_context);
        }
        let qkv = [inputs.q, inputs.k, inputs.v].map(host_primitive);
        let mask = inputs.mask.map(|m| m.into_primitive().tensor());
        let [q, k, v] = crate::ops::attention::host::backward(
            qkv,
            mask,
            inputs.heads,
            weights.into_primitive().tensor(),
            host_primitive(d_context),
        )
        .map(from_host);
        AttentionGradients { q, k, v }
    }

    fn circuit_forward(
        program: &RealCircuit,
        inputs: Tensor<Self, 2>,
        weights: Tensor<Self, 2>,
    ) -> Tensor<Self, 2> {
        circuit::host::forward(program, inputs, weights)
    }

    fn circuit_backward(
        program: &RealCircuit,
        inputs: Tensor<Self, 2>,
        weights: Tensor<Self, 2>,
        d_z: Tensor<Self, 2>,
    ) -> CircuitGradients<Self> {
        circuit::host::backward(program, inputs, weights, d_z)
    }

    fn propagate_forward(
        generators: Tensor<Self, 4>,
        initial: Tensor<Self, 2>,
        polynomial: &SquaredPolynomial,
    ) -> PropagateTape<Self> {
        propagate::host::propagate_forward(generators, initial, polynomial)
    }

    fn propagate_backward(
        generators: Tensor<Self, 4>,
        tape: PropagateTape<Self>,
        d_output: Tensor<Self, 2>,
        polynomial: &SquaredPolynomial,
    ) -> PropagateGradients<Self> {
        propagate::host::propagate_backward(generators, tape, d_output, polynomial)
    }

    fn exact_states<'a>(
        input: ExactStates<'a, Self>,
        composed: impl FnOnce(ExactStates<'a, Self>) -> Tensor<Self, 2>,
    ) -> Tensor<Self, 2> {
        expmv::host::exact_states(input).unwrap_or_else(composed)
    }

    fn host_lanes() -> usize {
        quench_host::lanes::host_cores()
    }
}

/// The CPU backend in f64, the tests' reference arithmetic: exact matmuls, and the tensor-op
/// compositions (the host kernels compute in f32).
impl QuenchOps for NdArray<f64> {
    fn precise_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_matmul(lhs, rhs)
    }

    fn exact_states<'a>(
        input: ExactStates<'a, Self>,
        composed: impl FnOnce(ExactStates<'a, Self>) -> Tensor<Self, 2>,
    ) -> Tensor<Self, 2> {
        expmv::host::exact_states(input).unwrap_or_else(composed)
    }
}

/// Every CubeCL runtime in f32 (CUDA, and wgpu with lavapipe in CI): the operations' CubeCL
/// kernels where one exists (`ops/<op>/cube.rs`), the default composition elsewhere. CUDA's
/// products may run on tensor cores, and a Vulkan driver may give cubek cooperative matrices
/// in reduced precision: `precise_matmul` takes cubek's unit matmul instead (f32 registers,
/// one product), and the default's three products only where cubek refuses the problem.
#[cfg(any(feature = "cuda", feature = "wgpu"))]
impl<R: burn_cubecl::CubeRuntime, BT: burn_cubecl::BoolElement> QuenchOps
    for burn_cubecl::CubeBackend<R, f32, i32, BT>
{
    fn precise_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        cube::f32_matmul(lhs.clone(), rhs.clone())
            .unwrap_or_else(|| split_matmul::<Self>(lhs, rhs, Self::float_matmul))
    }

    fn counter_normals(
        keys: &[StreamKey],
        draw: u64,
        len: usize,
        device: &Self::Device,
    ) -> FloatTensor<Self> {
        random::cube::counter_normals::<R, BT>(keys, draw, len, device)
    }

    fn dropout_forward<const D: usize>(h: Tensor<Self, D>, rate: f64) -> Dropped<Self, D> {
        dropout::cube::forward::<R, BT, D>(h, kept_fraction(rate))
    }

    fn sgld_step(
        params: [Tensor<Self, 3>; 4],
        features: Tensor<Self, 3>,
        labels: Tensor<Self, 3>,
        step: &SgldStep<'_, Self>,
    ) -> [Tensor<Self, 3>; 4] {
        sgld::cube::sgld_step(params, features, labels, step)
    }

    fn attention_forward(inputs: &AttentionInputs<Self>) -> AttentionOutput<Self> {
        attention::cube::attention_forward(inputs)
    }

    fn attention_backward(
        inputs: AttentionInputs<Self>,
        weights: Tensor<Self, 4>,
        d_context: Tensor<Self, 3>,
    ) -> AttentionGradients<Self> {
        attention::cube::attention_backward(inputs, weights, d_context)
    }

    fn adam_coefficients(
        config: AdamConfig,
        steps: Tensor<Self, 3>,
        lr: Tensor<Self, 3>,
    ) -> AdamStep<Self> {
        adam::cube::coefficients(config, steps, lr)
    }

    fn adam_step(
        config: AdamConfig,
        params: Vec<Tensor<Self, 3>>,
        grads: Vec<Tensor<Self, 3>>,
        moments: Vec<[Tensor<Self, 3>; 2]>,
        step: &AdamStep<Self>,
    ) -> adam::Stepped<Self> {
        adam::cube::adam_step(config, params, grads, moments, step, None)
    }

    fn mlp_train_step(
        step: &MlpStep<'_, Self>,
        params: Vec<Tensor<Self, 3>>,
        moments: Vec<[Tensor<Self, 3>; 2]>,
        tape: MlpTape<Self>,
        objective: MlpObjective<Self>,
    ) -> MlpStepped<Self> {
        mlp::train_step_with(
            step,
            params,
            moments,
            tape,
            objective,
            mlp::cube::cross_entropy,
            mlp::cube::update,
        )
    }

    fn dense_forward(
        x: Tensor<Self, 3>,
        weight: &Tensor<Self, 3>,
        bias: &Tensor<Self, 3>,
        activation: Option<Activation>,
    ) -> DenseOutput<Self> {
        dense::cube::dense_forward(x, weight, bias, activation)
    }

    fn dense_backward(
        x: Tensor<Self, 3>,
        weight: &Tensor<Self, 3>,
        kept: Tensor<Self, 3>,
        dy: Tensor<Self, 3>,
        activation: Option<Activation>,
    ) -> DenseGradients<Self> {
        dense::cube::dense_backward(x, weight, kept, dy, activation)
    }

    fn layer_norm_forward(
        x: Tensor<Self, 3>,
        gamma: &Tensor<Self, 3>,
        beta: &Tensor<Self, 3>,
        eps: f64,
    ) -> Normed<Self> {
        dense::cube::layer_norm_forward(x, gamma, beta, eps)
    }

    fn layer_norm_backward(
        tape: NormTape<Self>,
        gamma: &Tensor<Self, 3>,
        dy: Tensor<Self, 3>,
    ) -> NormGradients<Self> {
        dense::cube::layer_norm_backward(tape, gamma, dy)
    }

    fn circuit_forward(
        program: &RealCircuit,
        inputs: Tensor<Self, 2>,
        weights: Tensor<Self, 2>,
    ) -> Tensor<Self, 2> {
        circuit::cube::circuit_forward(program, inputs, weights)
    }

    fn circuit_backward(
        program: &RealCircuit,
        inputs: Tensor<Self, 2>,
        weights: Tensor<Self, 2>,
        d_z: Tensor<Self, 2>,
    ) -> CircuitGradients<Self> {
        circuit::cube::circuit_backward(program, inputs, weights, d_z)
    }

    fn propagate_forward(
        generators: Tensor<Self, 4>,
        initial: Tensor<Self, 2>,
        polynomial: &SquaredPolynomial,
    ) -> PropagateTape<Self> {
        propagate::cube::propagate_forward(generators, initial, polynomial)
    }

    fn propagate_backward(
        generators: Tensor<Self, 4>,
        tape: PropagateTape<Self>,
        d_output: Tensor<Self, 2>,
        polynomial: &SquaredPolynomial,
    ) -> PropagateGradients<Self> {
        propagate::cube::propagate_backward(generators, tape, d_output, polynomial)
    }

    fn conv_patches(
        x: Tensor<Self, 3>,
        patches: &PatchRows,
        conv: &ConvAffine<Self>,
        residual: Option<Tensor<Self, 3>>,
        rectify: bool,
    ) -> Tensor<Self, 3> {
        conv::cube::conv_patches(x, patches, conv, residual, rectify)
    }

    fn lstm_forward(
        inputs: Tensor<Self, 4>,
        weights: &LstmWeights<Self>,
        _lanes: usize,
    ) -> LstmTape<Self> {
        lstm::cube::lstm_forward(inputs, weights)
    }

    fn lstm_backward(
        weights: &LstmWeights<Self>,
        tape: LstmTape<Self>,
        d_output: Tensor<Self, 4>,
        _lanes: usize,
    ) -> LstmGradients<Self> {
        lstm::cube::lstm_backward(weights, tape, d_output)
    }
}

/// Autodiff: each operation of the inner backend, with its backward pass through the inner
/// backend's operations (so gradients are as precise as values).
impl<B: QuenchOps, C: CheckpointStrategy> QuenchOps for Autodiff<B, C> {
    fn zeros<const D: usize>(shape: [usize; D], device: &Self::Device) -> Tensor<Self, D> {
        // A constant: the inner backend's zeros, outside the graph.
        Tensor::from_inner(B::zeros(shape, device))
    }

    fn precise_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct PreciseMatmul;

        impl<B: QuenchOps> Backward<B, 2> for PreciseMatmul {
            type State = (NodeId, NodeId, Shape, Shape);

            fn backward(
                self,
                ops: Ops<Self::State, 2>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let [node_lhs, node_rhs] = ops.parents;
                let grad = grads.consume::<B>(&ops.node);
                let (lhs_state, rhs_state, lhs_shape, rhs_shape) = ops.state;
                if let Some(node) = node_lhs {
                    let rhs: FloatTensor<B> = checkpointer.retrieve_node_output(rhs_state);
                    let product = B::precise_matmul(grad.clone(), B::float_transpose(rhs));
                    grads.register::<B>(node.id, broadcast_shape::<B>(product, &lhs_shape));
                }
                if let Some(node) = node_rhs {
                    let lhs: FloatTensor<B> = checkpointer.retrieve_node_output(lhs_state);
                    let product = B::precise_matmul(B::float_transpose(lhs), grad);
                    grads.register::<B>(node.id, broadcast_shape::<B>(product, &rhs_shape));
                }
            }
        }

        match PreciseMatmul
            .prepare::<C>([lhs.node.clone(), rhs.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = (
                    prep.checkpoint(&lhs),
                    prep.checkpoint(&rhs),
                    lhs.primitive.shape(),
                    rhs.primitive.shape(),
                );
                prep.finish(state, B::precise_matmul(lhs.primitive, rhs.primitive))
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::precise_matmul(lhs.primitive, rhs.primitive))
            }
        }
    }

    fn float_view(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct View;

        impl<B: QuenchOps> Backward<B, 1> for View {
            /// The input's shape.
            type State = Shape;

            fn backward(self, ops: Ops<Shape, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let [parent] = ops.parents;
                let grad = grads.consume::<B>(&ops.node);
                if let Some(node) = parent {
                    grads.register::<B>(node.id, B::float_view(grad, ops.state));
                }
            }
        }

        let input = tensor.primitive.shape();
        match View
            .prepare::<C>([tensor.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(input, B::float_view(tensor.primitive, shape)),
            OpsKind::UnTracked(prep) => prep.finish(B::float_view(tensor.primitive, shape)),
        }
    }

    /// Constants: no gradient flows into random draws.
    fn counter_normals(
        keys: &[StreamKey],
        draw: u64,
        len: usize,
        device: &Self::Device,
    ) -> FloatTensor<Self> {
        <Self as AutodiffBackend>::from_inner(B::counter_normals(keys, draw, len, device))
    }

    /// Constants, as the normals.
    fn dropout_mask<const D: usize>(
        shape: Shape,
        rate: f64,
        device: &Self::Device,
    ) -> Tensor<Self, D> {
        Tensor::from_inner(B::dropout_mask(shape, rate, device))
    }

    fn dropout_forward<const D: usize>(h: Tensor<Self, D>, rate: f64) -> Dropped<Self, D> {
        dropout::autodiff_dropout(h, rate)
    }

    /// The inner backend's, on values (first-order autodiff).
    fn dropout_backward<const D: usize>(
        dy: Tensor<Self, D>,
        mask: Tensor<Self, D>,
    ) -> Tensor<Self, D> {
        Tensor::from_inner(B::dropout_backward(dy.inner(), mask.inner()))
    }

    fn batch_norm_forward(
        x: Tensor<Self, 3>,
        gamma: &Tensor<Self, 3>,
        beta: &Tensor<Self, 3>,
        eps: f64,
        rectify: bool,
    ) -> BatchNormed<Self> {
        batch_norm::autodiff_batch_norm(x, gamma, beta, eps, rectify)
    }

    fn lstm_forward(
        inputs: Tensor<Self, 4>,
        weights: &LstmWeights<Self>,
        lanes: usize,
    ) -> LstmTape<Self> {
        lstm::autodiff_forward(inputs, weights, lanes)
    }

    fn lstm_backward(
        weights: &LstmWeights<Self>,
        tape: LstmTape<Self>,
        d_output: Tensor<Self, 4>,
        lanes: usize,
    ) -> LstmGradients<Self> {
        lstm::autodiff_backward(weights, tape, d_output, lanes)
    }

    fn dense_forward(
        x: Tensor<Self, 3>,
        weight: &Tensor<Self, 3>,
        bias: &Tensor<Self, 3>,
        activation: Option<Activation>,
    ) -> DenseOutput<Self> {
        dense::autodiff_dense(x, weight, bias, activation)
    }

    fn dense_backward(
        x: Tensor<Self, 3>,
        weight: &Tensor<Self, 3>,
        kept: Tensor<Self, 3>,
        dy: Tensor<Self, 3>,
        activation: Option<Activation>,
    ) -> DenseGradients<Self> {
        let weight = weight.clone().inner();
        let g = B::dense_backward(x.inner(), &weight, kept.inner(), dy.inner(), activation);
        DenseGradients {
            x: Tensor::from_inner(g.x),
            weight: Tensor::from_inner(g.weight),
            bias: Tensor::from_inner(g.bias),
        }
    }

    fn layer_norm_forward(
        x: Tensor<Self, 3>,
        gamma: &Tensor<Self, 3>,
        beta: &Tensor<Self, 3>,
        eps: f64,
    ) -> Normed<Self> {
        dense::autodiff_layer_norm(x, gamma, beta, eps)
    }

    fn layer_norm_backward(
        tape: NormTape<Self>,
        gamma: &Tensor<Self, 3>,
        dy: Tensor<Self, 3>,
    ) -> NormGradients<Self> {
        let tape = NormTape {
            normed: tape.normed.inner(),
            inv_std: tape.inv_std.inner(),
        };
        let g = B::layer_norm_backward(tape, &gamma.clone().inner(), dy.inner());
        NormGradients {
            x: Tensor::from_inner(g.x),
            gamma: Tensor::from_inner(g.gamma),
            beta: Tensor::from_inner(g.beta),
        }
    }

    fn weighted_sum(values: Tensor<Self, 3>, weights: Tensor<Self, 2>) -> Tensor<Self, 2> {
        pooling::autodiff_weighted_sum(values, weights)
    }

    /// The inner backend's, on values (first-order autodiff).
    fn weighted_sum_backward(
        values: &Tensor<Self, 3>,
        weights: &Tensor<Self, 2>,
        grad: Tensor<Self, 2>,
    ) -> PoolGradients<Self> {
        let g = B::weighted_sum_backward(
            &values.clone().inner(),
            &weights.clone().inner(),
            grad.inner(),
        );
        PoolGradients {
            values: Tensor::from_inner(g.values),
            weights: Tensor::from_inner(g.weights),
        }
    }

    fn attention_forward(inputs: &AttentionInputs<Self>) -> AttentionOutput<Self> {
        attention::autodiff_attention(inputs)
    }

    fn attention_backward(
        inputs: AttentionInputs<Self>,
        weights: Tensor<Self, 4>,
        d_context: Tensor<Self, 3>,
    ) -> AttentionGradients<Self> {
        attention::autodiff_attention_backward(inputs, weights, d_context)
    }

    fn circuit_forward(
        program: &RealCircuit,
        inputs: Tensor<Self, 2>,
        weights: Tensor<Self, 2>,
    ) -> Tensor<Self, 2> {
        circuit::autodiff_forward(program, inputs, weights)
    }

    fn circuit_backward(
        program: &RealCircuit,
        inputs: Tensor<Self, 2>,
        weights: Tensor<Self, 2>,
        d_z: Tensor<Self, 2>,
    ) -> CircuitGradients<Self> {
        circuit::autodiff_backward(program, inputs, weights, d_z)
    }

    fn propagate_forward(
        generators: Tensor<Self, 4>,
        initial: Tensor<Self, 2>,
        polynomial: &SquaredPolynomial,
    ) -> PropagateTape<Self> {
        propagate::autodiff_forward(generators, initial, polynomial)
    }

    fn propagate_backward(
        generators: Tensor<Self, 4>,
        tape: PropagateTape<Self>,
        d_output: Tensor<Self, 2>,
        polynomial: &SquaredPolynomial,
    ) -> PropagateGradients<Self> {
        propagate::autodiff_backward(generators, tape, d_output, polynomial)
    }

    fn host_lanes() -> usize {
        B::host_lanes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reductions::Reduce;
    use burn::tensor::TensorData;

    type Host = NdArray<f32>;

    /// Deterministic values spread over four decades, both signs.
    fn values(len: usize, salt: u64) -> Vec<f32> {
        (0..len as u64)
            .map(|i| {
                let x = (i.wrapping_mul(2_654_435_761).wrapping_add(salt * 97) % 10_007) as f32;
                let sign = if i % 3 == 0 { -1.0 } else { 1.0 };
                sign * (0.1 + x / 10_007.0) * 10f32.powi((i % 4) as i32 - 2)
            })
            .collect()
    }

    fn tensor<B: Backend>(shape: [usize; 3], salt: u64) -> Tensor<B, 3> {
        let len = shape.iter().product();
        Tensor::from_data(
            TensorData::new(values(len, salt), shape),
            &Default::default(),
        )
    }

    /// `[batch, n, k] @ [batch, k, m]` in f64 on the host.
    fn reference(a: &[f32], b: &[f32], [batch, n, k]: [usize; 3], m: usize) -> Vec<f64> {
        let mut out = vec![0.0; batch * n * m];
        for (t, row, col) in
            (0..batch).flat_map(|t| (0..n).flat_map(move |r| (0..m).map(move |c| (t, r, c))))
        {
            out[(t * n + row) * m + col] = (0..k)
                .map(|i| f64::from(a[(t * n + row) * k + i]) * f64::from(b[(t * k + i) * m + col]))
                .sum();
        }
        out
    }

    /// Rounds to tf32 (11 significant bits, nearest even), as a tensor core stages an f32.
    fn to_tf32(x: f32) -> f32 {
        let bits = x.to_bits();
        f32::from_bits((bits + 0xFFF + ((bits >> 13) & 1)) & !0x1FFF)
    }

    /// A matmul that rounds its operands to tf32 and accumulates in f32.
    fn tf32_matmul(lhs: FloatTensor<Host>, rhs: FloatTensor<Host>) -> FloatTensor<Host> {
        let round = |x: FloatTensor<Host>| {
            let x = Tensor::<Host, 3>::from_primitive(TensorPrimitive::Float(x));
            let dims = x.dims();
            let data: Vec<f32> = x.into_data().to_vec().expect("f32 data");
            let rounded = data.into_iter().map(to_tf32).collect::<Vec<_>>();
            Tensor::<Host, 3>::from_data(TensorData::new(rounded, dims), &Default::default())
                .into_primitive()
                .tensor()
        };
        Host::float_matmul(round(lhs), round(rhs))
    }

    fn worst_relative_error(got: Tensor<Host, 3>, want: &[f64]) -> f64 {
        let scale = want.iter().fold(0f64, |m, w| m.max(w.abs()));
        let got: Vec<f32> = got.into_data().to_vec().expect("f32 data");
        quench_support::stats::max_or_nan(
            got.iter()
                .zip(want)
                .map(|(g, w)| (f64::from(*g) - w).abs() / scale),
        )
    }

    #[test]
    fn the_split_product_keeps_f32_precision_where_each_product_rounds_to_tf32() {
        let (shape, m) = ([3, 24, 40], 16);
        let (a, b) = (tensor::<Host>(shape, 1), tensor::<Host>([3, 40, m], 2));
        let a_values: Vec<f32> = a.clone().into_data().to_vec().expect("f32 data");
        let b_values: Vec<f32> = b.clone().into_data().to_vec().expect("f32 data");
        let want = reference(&a_values, &b_values, shape, m);
        let (a, b) = (a.into_primitive().tensor(), b.into_primitive().tensor());

        let rounded =
            Tensor::from_primitive(TensorPrimitive::Float(tf32_matmul(a.clone(), b.clone())));
        let split = Tensor::from_primitive(TensorPrimitive::Float(split_matmul::<Host>(
            a,
            b,
            tf32_matmul,
        )));
        let (rounded, split) = (
            worst_relative_error(rounded, &want),
            worst_relative_error(split, &want),
        );
        // The emulation bites (tf32 alone is near 2^-11 off), and the split undoes it.
        assert!(rounded > 1e-4, "tf32 product error {rounded:.2e}");
        assert!(
            split < 1e-6,
            "split product error {split:.2e} (tf32 alone {rounded:.2e})"
        );
    }

    crate::device_test! {
        /// `1 + 2^-11` is exact in f32 and not in tf32, bf16 or f16 (which round it to 1), and
        /// every partial sum `j (1 + 2^-11)` of a row of it times ones (`j` up to 300, 20
        /// significant bits) is exact in f32: an f32 product gives `k (1 + 2^-11)` exactly,
        /// one that stages operands in a narrower format gives `k`. Plain, batched and
        /// broadcast shapes, small and large enough for a tensor core's tiles.
        fn the_precise_product_is_exact_f32_on_the_device<B>(device) {
            let a = 1.0 + 2f32.powi(-11);
            for (batch, m, k, n) in [(1, 1, 7, 1), (3, 5, 33, 2), (2, 64, 300, 48)] {
                let lhs = Tensor::<B::InnerBackend, 3>::full([batch, m, k], a, device);
                let rhs = Tensor::<B::InnerBackend, 3>::ones([1, k, n], device);
                let product = crate::readback::to_host_f32(precise_matmul(lhs, rhs));
                assert_eq!(product.len(), batch * m * n);
                let want = k as f32 * a;
                assert!(product.iter().all(|&x| x == want), "{batch}x{m}x{k}x{n}");
            }
        }
    }

    #[test]
    fn the_autodiff_product_gives_matmuls_values_and_gradients_with_broadcasting() {
        type Diff = Autodiff<Host>;
        let a = tensor::<Diff>([3, 5, 7], 3).require_grad();
        let b = tensor::<Diff>([1, 7, 4], 4).require_grad();
        let weights = tensor::<Diff>([3, 5, 4], 5);

        let plain = a.clone().matmul(b.clone());
        let precise = precise_matmul(a.clone(), b.clone());
        plain
            .clone()
            .into_data()
            .assert_approx_eq::<f32>(&precise.clone().into_data(), Default::default());

        let plain_grads = (plain * weights.clone()).sum_all().backward();
        let precise_grads = (precise * weights).sum_all().backward();
        for (x, shape) in [(&a, [3, 5, 7]), (&b, [1, 7, 4])] {
            let want = x.grad(&plain_grads).expect("gradient of the matmul");
            let got = x
                .grad(&precise_grads)
                .expect("gradient of the precise matmul");
            assert_eq!(got.dims(), shape);
            want.into_data()
                .assert_approx_eq::<f32>(&got.into_data(), Default::default());
        }
    }

    #[test]
    fn dropout_masks_are_reproducible_fresh_per_call_and_constants_under_autodiff() {
        let device = Default::default();
        let draw = |seed: u64| {
            let _hold = crate::SeededGenerator::acquire::<Host>(&device, seed);
            let first = Host::dropout_mask::<3>(Shape::new([2, 50, 41]), 0.25, &device);
            let second = Host::dropout_mask::<3>(Shape::new([2, 50, 41]), 0.25, &device);
            let tracked = Autodiff::<Host>::dropout_mask::<2>(Shape::new([7, 9]), 0.5, &device);
            (first.into_data(), second.into_data(), tracked)
        };
        let (first, second, tracked) = draw(5);
        let (again, _, _) = draw(5);
        assert_eq!(first, again, "the same seed, the same mask");
        assert_ne!(first, second, "each call a fresh mask");
        assert_eq!(first.shape, Shape::new([2, 50, 41]));
        let values: Vec<f32> = first.to_vec().expect("f32 mask");
        assert!(values.iter().all(|&m| m == 0.0 || m == 1.0 / 0.75));
        let kept = values.iter().filter(|&&m| m > 0.0).count() as f64 / values.len() as f64;
        // 4,100 values: the kept fraction's standard deviation is 0.0068.
        assert!((kept - 0.75).abs() < 0.035, "kept {kept}");
        assert!(!tracked.is_require_grad());
        assert_eq!(tracked.dims(), [7, 9]);
    }

    #[test]
    fn the_host_normals_are_the_default_compositions_on_every_form_of_the_cpu_backend() {
        let keys = [StreamKey::from_seed(3), StreamKey::from_seed(u64::MAX)];
        let device = Default::default();
        let values = |x: FloatTensor<Host>| {
            let x = Tensor::<Host, 2>::from_primitive(TensorPrimitive::Float(x));
            x.into_data().to_vec::<f32>().expect("f32 data")
        };
        let default = normals_tensor::<Host>(&keys, 9, 1_001, &device);
        let default: Vec<f32> = default.into_data().to_vec().expect("f32 data");
        let host = values(Host::counter_normals(&keys, 9, 1_001, &device));
        let worst = quench_support::stats::max_abs_difference(&host, &default);
        assert_eq!(host.len(), 2 * 1_001);
        assert!(worst < 1e-5, "host kernel vs composition: {worst:e}");
        assert_ne!(host[..1_001], host[1_001..], "each key its own stream");

        let tracked = Autodiff::<Host>::counter_normals(&keys, 9, 1_001, &device);
        let tracked = Tensor::<Autodiff<Host>, 2>::from_primitive(TensorPrimitive::Float(tracked));
        assert_eq!(
            tracked
                .inner()
                .into_data()
                .to_vec::<f32>()
                .expect("f32 data"),
            host
        );
    }
}
