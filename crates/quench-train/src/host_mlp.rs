//! Member MLPs in host memory with a hand-derived backward: the CPU backend's form of a small
//! network's training step, where autodiff's graph of per-layer ops (and the copies behind
//! it) costs more than the arithmetic, as for a meta-learning policy adapted per task (16
//! members of about 38k parameters, one input row each).

use burn::tensor::Tensor;
use quench_kernels::host::lanes::in_lanes;
use quench_kernels::readback::{float_tensor, to_host_f32};
use quench_kernels::{CpuBackend, QuenchOps, host_lanes};

use crate::ensemble::{Activation, EnsembleMlp};
use crate::optim::{AdamConfig, AdamUpdate};

/// One layer's values, row-major: `weight` `[members, fan_in, fan_out]`, `bias`
/// `[members, fan_out]`. Also the layout of its gradients.
#[derive(Clone, Debug, PartialEq)]
pub struct HostLayer {
    /// `[members, fan_in, fan_out]`.
    pub weight: Vec<f32>,
    /// `[members, fan_out]`.
    pub bias: Vec<f32>,
    /// Inputs per member row.
    pub fan_in: usize,
    /// Outputs per member row.
    pub fan_out: usize,
}

/// Multiply-adds of a layer's pass from which its work is split over the cores: below it a
/// thread costs more than it saves (the meta-learning policy's 16 x 128 x 128 stays on one).
const THREADED_FROM: usize = 1 << 20;

/// The lanes for `work` multiply-adds.
fn lanes_for(work: usize) -> usize {
    if work >= THREADED_FROM {
        host_lanes::<CpuBackend>()
    } else {
        1
    }
}

impl HostLayer {
    /// `x W + b` per member, `x` `[members, rows, fan_in]` to `[members, rows, fan_out]`.
    fn apply(&self, x: &[f32], members: usize, rows: usize) -> Vec<f32> {
        let (fan_in, fan_out) = (self.fan_in, self.fan_out);
        let lanes = lanes_for(members * rows * fan_in * fan_out);
        // Jobs are (member, column range): each returns its `[rows, columns]` block.
        let width = fan_out.div_ceil(lanes).max(1);
        let jobs: Vec<(usize, std::ops::Range<usize>)> = (0..members)
            .flat_map(|m| {
                (0..fan_out)
                    .step_by(width)
                    .map(move |j| (m, j..(j + width).min(fan_out)))
            })
            .collect();
        let blocks = in_lanes(jobs.clone(), lanes, |group| {
            group
                .into_iter()
                .map(|(m, columns)| {
                    let w = &self.weight[m * fan_in * fan_out..(m + 1) * fan_in * fan_out];
                    let b = &self.bias[m * fan_out..(m + 1) * fan_out][columns.clone()];
                    let mut block = Vec::with_capacity(rows * columns.len());
                    for r in 0..rows {
                        let start = block.len();
                        block.extend_from_slice(b);
                        let out = &mut block[start..];
                        let row = (m * rows + r) * fan_in;
                        // Row by row of W, so that the inner loop runs along contiguous
                        // outputs.
                        for (&xi, w_row) in x[row..row + fan_in].iter().zip(w.chunks_exact(fan_out))
                        {
                            out.iter_mut()
                                .zip(&w_row[columns.clone()])
                                .for_each(|(o, &wi)| *o += xi * wi);
                        }
                    }
                    block
                })
                .collect::<Vec<_>>()
        });
        let mut z = vec![0.0f32; members * rows * fan_out];
        for ((m, columns), block) in jobs.into_iter().zip(blocks.into_iter().flatten()) {
            for (r, values) in block.chunks_exact(columns.len()).enumerate() {
                let at = (m * rows + r) * fan_out;
                z[at + columns.start..at + columns.end].copy_from_slice(values);
            }
        }
        z
    }

    /// Zeros in this layer's layout.
    fn zeros_like(&self) -> Self {
        Self {
            weight: vec![0.0; self.weight.len()],
            bias: vec![0.0; self.bias.len()],
            ..*self
        }
    }
}

/// `members` MLPs of the same widths in host memory, as [`EnsembleMlp`] computes them.
#[derive(Clone, Debug)]
pub struct HostMlp {
    /// The layers, input first.
    pub layers: Vec<HostLayer>,
    /// Members in the ensemble.
    pub members: usize,
    /// The hidden nonlinearity.
    pub activation: Activation,
}

/// What a forward pass keeps for the backward pass.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Every layer's input `[members, rows, fan_in]`; hidden ones are post-activation.
    inputs: Vec<Vec<f32>>,
    /// Every hidden layer's pre-activation `[members, rows, fan_out]`.
    pre: Vec<Vec<f32>>,
    /// Every hidden layer's dropout mask (`0` or `1 / keep`) in its layout; empty without
    /// dropout.
    masks: Vec<Vec<f32>>,
    /// Rows per member.
    rows: usize,
    /// The network's output `[members, rows, widths.last()]`.
    pub output: Vec<f32>,
}

impl HostMlp {
    /// The values of `mlp` (one device-to-host copy per tensor).
    pub fn from_ensemble<B: QuenchOps>(mlp: &EnsembleMlp<B>) -> Self {
        let layers = mlp
            .layers
            .iter()
            .map(|layer| {
                let [_, fan_in, fan_out] = layer.weight.dims();
                HostLayer {
                    weight: to_host_f32(layer.weight.clone()),
                    bias: to_host_f32(layer.bias.clone()),
                    fan_in,
                    fan_out,
                }
            })
            .collect();
        Self {
            layers,
            members: mlp.members(),
            activation: mlp.activation,
        }
    }

    /// The same values as an [`EnsembleMlp`] on `device`.
    pub fn to_ensemble<B: QuenchOps>(&self, device: &B::Device) -> EnsembleMlp<B> {
        let params = layer_tensors::<B>(&self.layers, self.members, device);
        EnsembleMlp::from_params(params, self.activation)
    }

    /// `members` copies of a one-member network.
    pub fn repeat(&self, members: usize) -> Self {
        let layers = self
            .layers
            .iter()
            .map(|l| HostLayer {
                weight: l.weight.repeat(members),
                bias: l.bias.repeat(members),
                ..*l
            })
            .collect();
        Self {
            layers,
            members,
            activation: self.activation,
        }
    }

    /// Applies every member to its own `rows` rows of `x` `[members, rows, fan_in]`; a large
    /// layer's output columns are split over the cores.
    pub fn forward(&self, x: &[f32], rows: usize) -> Trace {
        self.forward_with_dropout(x, rows, Vec::new())
    }

    /// [`forward`](Self::forward) with inverted dropout after every hidden layer: `masks` has
    /// one `[members, rows, width]` mask per hidden layer (`0` where a unit is dropped,
    /// `1 / keep` elsewhere), or none.
    pub fn forward_with_dropout(&self, x: &[f32], rows: usize, masks: Vec<Vec<f32>>) -> Trace {
        let last = self.layers.len().saturating_sub(1);
        debug_assert!(
            masks.is_empty() || masks.len() == last,
            "one mask per hidden layer"
        );
        let mut inputs = Vec::with_capacity(self.layers.len());
        let mut pre = Vec::with_capacity(last);
        let mut h = x.to_vec();
        for (l, layer) in self.layers.iter().enumerate() {
            let z = layer.apply(&h, self.members, rows);
            let next = if l < last {
                let mut post: Vec<f32> = z.iter().map(|&v| self.activation.at(v)).collect();
                if let Some(mask) = masks.get(l) {
                    post.iter_mut().zip(mask).for_each(|(h, &k)| *h *= k);
                }
                pre.push(z);
                post
            } else {
                z
            };
            inputs.push(std::mem::replace(&mut h, next));
        }
        Trace {
            inputs,
            pre,
            masks,
            rows,
            output: h,
        }
    }

    /// Turns `below`, the gradient at hidden layer `hidden`'s output (the next layer's input),
    /// into the gradient at its pre-activation: through its dropout mask and the
    /// nonlinearity's slope.
    fn through_hidden(&self, trace: &Trace, hidden: usize, below: &mut [f32]) {
        let (pre, post) = (&trace.pre[hidden], &trace.inputs[hidden + 1]);
        match trace.masks.get(hidden) {
            None => below
                .iter_mut()
                .zip(pre.iter().zip(post))
                .for_each(|(b, (&p, &h))| *b *= self.activation.slope(p, h)),
            // The stored output is masked: the slope takes the activation itself.
            Some(mask) => below
                .iter_mut()
                .zip(pre.iter().zip(mask))
                .for_each(|(b, (&p, &k))| {
                    *b *= k * self.activation.slope(p, self.activation.at(p));
                }),
        }
    }

    /// The gradients of `sum(output * grad_output)` with respect to every layer, in the
    /// layers' layout, for the pass that made `trace`.
    pub fn backward(&self, trace: &Trace, grad_output: &[f32]) -> Vec<HostLayer> {
        let rows = trace.rows;
        let mut delta = grad_output.to_vec();
        let mut gradients: Vec<HostLayer> = Vec::with_capacity(self.layers.len());
        for (l, layer) in self.layers.iter().enumerate().rev() {
            let (fan_in, fan_out) = (layer.fan_in, layer.fan_out);
            let input = &trace.inputs[l];
            let mut weight = vec![0.0f32; layer.weight.len()];
            let mut bias = vec![0.0f32; layer.bias.len()];
            let mut below = vec![0.0f32; self.members * rows * fan_in];
            for m in 0..self.members {
                let span = m * fan_in * fan_out..(m + 1) * fan_in * fan_out;
                let (w, gw) = (&layer.weight[span.clone()], &mut weight[span]);
                let gb = &mut bias[m * fan_out..(m + 1) * fan_out];
                for r in 0..rows {
                    let d = &delta[(m * rows + r) * fan_out..(m * rows + r + 1) * fan_out];
                    let x = &input[(m * rows + r) * fan_in..(m * rows + r + 1) * fan_in];
                    let back = &mut below[(m * rows + r) * fan_in..(m * rows + r + 1) * fan_in];
                    gb.iter_mut().zip(d).for_each(|(g, &v)| *g += v);
                    for (((&xi, w_row), gw_row), b) in x
                        .iter()
                        .zip(w.chunks_exact(fan_out))
                        .zip(gw.chunks_exact_mut(fan_out))
                        .zip(back.iter_mut())
                    {
                        *b = w_row.iter().zip(d).map(|(&wi, &v)| wi * v).sum();
                        gw_row.iter_mut().zip(d).for_each(|(g, &v)| *g += xi * v);
                    }
                }
            }
            if l > 0 {
                self.through_hidden(trace, l - 1, &mut below);
            }
            delta = below;
            gradients.push(HostLayer {
                weight,
                bias,
                fan_in,
                fan_out,
            });
        }
        gradients.reverse();
        gradients
    }

    /// One Adam step on the gradients of `sum(output * grad_output)` for the pass that made
    /// `trace`, fused with the backward pass: each weight's gradient is formed where it is
    /// used and never stored, and the gradient below a layer is taken from its weights before
    /// they move. Per weight that is one read of the value and its two moments and one write
    /// of each (six streams), where the backward and then [`MemberAdam`](crate::optim::MemberAdam)
    /// take nine. Every member steps at rate `lr`; large layers are split by weight rows over
    /// the cores.
    pub fn adam_step(&mut self, trace: &Trace, grad_output: &[f32], adam: &mut HostAdam, lr: f64) {
        let (members, rows) = (self.members, trace.rows);
        let updates = adam.advance(&vec![lr; members], &vec![true; members]);
        let updates: Vec<AdamUpdate> = updates.into_iter().flatten().collect();
        let mut delta = grad_output.to_vec();
        for l in (0..self.layers.len()).rev() {
            let layer = &mut self.layers[l];
            let (first, second) = (&mut adam.first[l], &mut adam.second[l]);
            let (fan_in, fan_out) = (layer.fan_in, layer.fan_out);
            let input = &trace.inputs[l];
            let below_wanted = l > 0;
            for (m, update) in updates.iter().enumerate() {
                let span = m * fan_out..(m + 1) * fan_out;
                let mut sum = vec![0.0f32; fan_out];
                for d in delta[m * rows * fan_out..(m + 1) * rows * fan_out].chunks_exact(fan_out) {
                    sum.iter_mut().zip(d).for_each(|(s, &v)| *s += v);
                }
                update.apply_all(
                    &mut layer.bias[span.clone()],
                    &sum,
                    &mut first.bias[span.clone()],
                    &mut second.bias[span],
                );
            }
            let lanes = lanes_for(members * rows * fan_in * fan_out);
            let piece = fan_in.div_ceil(lanes).max(1) * fan_out;
            let mut jobs = Vec::new();
            for (m, ((w, m1), m2)) in layer
                .weight
                .chunks_mut(fan_in * fan_out)
                .zip(first.weight.chunks_mut(fan_in * fan_out))
                .zip(second.weight.chunks_mut(fan_in * fan_out))
                .enumerate()
            {
                for (k, ((w, m1), m2)) in w
                    .chunks_mut(piece)
                    .zip(m1.chunks_mut(piece))
                    .zip(m2.chunks_mut(piece))
                    .enumerate()
                {
                    jobs.push(WeightRows {
                        member: m,
                        first_row: k * piece / fan_out,
                        weight: w,
                        first: m1,
                        second: m2,
                    });
                }
            }
            let shape = LayerShape {
                rows,
                fan_in,
                fan_out,
                below_wanted,
            };
            let belows = in_lanes(jobs, lanes, |group| {
                group
                    .into_iter()
                    .map(|job| {
                        let update = &updates[job.member];
                        job.step(shape, input, &delta, update)
                    })
                    .collect::<Vec<_>>()
            });
            if !below_wanted {
                break;
            }
            // Gather the jobs' `[rows, their weight rows]` blocks into `[members, rows,
            // fan_in]`, then through the activation's slope.
            let mut below = vec![0.0f32; members * rows * fan_in];
            for (m, first_row, block) in belows.into_iter().flatten() {
                let width = block.len() / rows.max(1);
                for (r, values) in block.chunks_exact(width.max(1)).enumerate() {
                    let at = (m * rows + r) * fan_in + first_row;
                    below[at..at + width].copy_from_slice(values);
                }
            }
            self.through_hidden(trace, l - 1, &mut below);
            delta = below;
        }
    }

    /// Takes every member's values from `other` (of the same widths) where `which` is set.
    pub fn copy_members(&mut self, other: &HostMlp, which: &[bool]) {
        let members = self.members;
        for (layer, from) in self.layers.iter_mut().zip(&other.layers) {
            for (values, source) in [
                (&mut layer.weight, &from.weight),
                (&mut layer.bias, &from.bias),
            ] {
                let per = values.len() / members.max(1);
                for ((to, from), &take) in values.chunks_mut(per).zip(source.chunks(per)).zip(which)
                {
                    if take {
                        to.copy_from_slice(from);
                    }
                }
            }
        }
    }

    /// One plain gradient-descent step, `theta -= lr * gradient`, in place.
    pub fn descend(&mut self, gradients: &[HostLayer], lr: f32) {
        for (layer, g) in self.layers.iter_mut().zip(gradients) {
            for (values, grads) in [(&mut layer.weight, &g.weight), (&mut layer.bias, &g.bias)] {
                values
                    .iter_mut()
                    .zip(grads)
                    .for_each(|(v, &d)| *v -= lr * d);
            }
        }
    }
}

/// Layers (or their gradients) of `members` members as tensors in [`EnsembleMlp::params`]'
/// order: weight `[members, fan_in, fan_out]` then bias `[members, 1, fan_out]`.
pub fn layer_tensors<B: QuenchOps>(
    layers: &[HostLayer],
    members: usize,
    device: &B::Device,
) -> Vec<Tensor<B, 3>> {
    layers
        .iter()
        .flat_map(|l| {
            [
                float_tensor(l.weight.clone(), [members, l.fan_in, l.fan_out], device),
                float_tensor(l.bias.clone(), [members, 1, l.fan_out], device),
            ]
        })
        .collect()
}

/// Adam's state for a [`HostMlp`]: first and second moments in its layers' layout and each
/// member's steps taken.
#[derive(Clone, Debug)]
pub struct HostAdam {
    config: AdamConfig,
    first: Vec<HostLayer>,
    second: Vec<HostLayer>,
    steps: Vec<u64>,
}

impl HostAdam {
    /// Zero moments for `mlp`.
    pub fn new(config: AdamConfig, mlp: &HostMlp) -> Self {
        let zeros: Vec<HostLayer> = mlp.layers.iter().map(HostLayer::zeros_like).collect();
        Self {
            config,
            first: zeros.clone(),
            second: zeros,
            steps: vec![0; mlp.members],
        }
    }

    /// Counts a step for every `active` member and returns its update at its rate `lrs[m]`
    /// (`None` for the others).
    fn advance(&mut self, lrs: &[f64], active: &[bool]) -> Vec<Option<AdamUpdate>> {
        self.steps
            .iter_mut()
            .zip(lrs.iter().zip(active))
            .map(|(steps, (&lr, &active))| {
                active.then(|| {
                    *steps += 1;
                    AdamUpdate::new(self.config, lr, *steps)
                })
            })
            .collect()
    }

    /// One step of `mlp` with its `gradients` (in its layers' layout, as
    /// [`HostMlp::backward`] gives them): member `m` at rate `lrs[m]` where `active[m]`;
    /// the others, with their moments and step counts, are left as they are.
    pub fn step(
        &mut self,
        mlp: &mut HostMlp,
        gradients: &[HostLayer],
        lrs: &[f64],
        active: &[bool],
    ) {
        let updates = self.advance(lrs, active);
        let members = mlp.members;
        for (((layer, g), first), second) in mlp
            .layers
            .iter_mut()
            .zip(gradients)
            .zip(&mut self.first)
            .zip(&mut self.second)
        {
            for (values, grads, m1, m2) in [
                (
                    &mut layer.weight,
                    &g.weight,
                    &mut first.weight,
                    &mut second.weight,
                ),
                (&mut layer.bias, &g.bias, &mut first.bias, &mut second.bias),
            ] {
                let per = values.len() / members.max(1);
                for ((((p, g), m1), m2), update) in values
                    .chunks_mut(per)
                    .zip(grads.chunks(per))
                    .zip(m1.chunks_mut(per))
                    .zip(m2.chunks_mut(per))
                    .zip(&updates)
                {
                    if let Some(update) = update {
                        update.apply_all(p, g, m1, m2);
                    }
                }
            }
        }
    }
}

/// A layer's sizes for one fused step.
#[derive(Clone, Copy)]
struct LayerShape {
    rows: usize,
    fan_in: usize,
    fan_out: usize,
    /// Whether the gradient below the layer is needed (not for the first layer).
    below_wanted: bool,
}

/// Consecutive weight rows of one member, with their moments.
struct WeightRows<'a> {
    member: usize,
    /// The index of the first of them among the layer's `fan_in` rows.
    first_row: usize,
    weight: &'a mut [f32],
    first: &'a mut [f32],
    second: &'a mut [f32],
}

impl WeightRows<'_> {
    /// Updates the rows and returns `(member, first_row, below)`, `below` the gradient at the
    /// layer's input for these rows, `[rows, weight rows]` (empty when not wanted), taken
    /// from the weights before the update.
    fn step(
        self,
        shape: LayerShape,
        input: &[f32],
        delta: &[f32],
        update: &AdamUpdate,
    ) -> (usize, usize, Vec<f32>) {
        let LayerShape {
            rows,
            fan_in,
            fan_out,
            below_wanted,
        } = shape;
        let count = self.weight.len() / fan_out;
        let mut below = vec![0.0f32; if below_wanted { rows * count } else { 0 }];
        let deltas = &delta[self.member * rows * fan_out..(self.member + 1) * rows * fan_out];
        let inputs = &input[self.member * rows * fan_in..(self.member + 1) * rows * fan_in];
        let mut gradient = vec![0.0f32; fan_out];
        for (k, ((w, m1), m2)) in self
            .weight
            .chunks_exact_mut(fan_out)
            .zip(self.first.chunks_exact_mut(fan_out))
            .zip(self.second.chunks_exact_mut(fan_out))
            .enumerate()
        {
            let i = self.first_row + k;
            if below_wanted {
                for (r, d) in deltas.chunks_exact(fan_out).enumerate() {
                    below[r * count + k] = w.iter().zip(d).map(|(&wi, &v)| wi * v).sum();
                }
            }
            // The weight row's gradient, sum over rows of input[r, i] * delta[r, :].
            gradient.fill(0.0);
            for (r, d) in deltas.chunks_exact(fan_out).enumerate() {
                let xi = inputs[r * fan_in + i];
                gradient.iter_mut().zip(d).for_each(|(g, &v)| *g += xi * v);
            }
            update.apply_all(w, &gradient, m1, m2);
        }
        (self.member, self.first_row, below)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::Init;
    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::TensorData;
    use quench_kernels::reductions::Reduce;
    use quench_support::stats::max_abs_difference;

    type Diff = Autodiff<NdArray<f32>>;

    #[test]
    fn forward_and_gradients_match_autodiff_for_every_activation() {
        let device = Default::default();
        for activation in [
            Activation::Tanh,
            Activation::Relu,
            Activation::LeakyRelu(0.1),
        ] {
            let mlp = EnsembleMlp::<Diff>::new(
                Init::TorchDefault,
                activation,
                3,
                &[5, 7, 6, 4],
                11,
                &device,
            );
            let rows = 2;
            let x: Vec<f32> = (0..3 * rows * 5).map(|i| (i as f32 * 0.71).sin()).collect();
            let upstream: Vec<f32> = (0..3 * rows * 4).map(|i| (i as f32 * 0.37).cos()).collect();
            let host = HostMlp::from_ensemble(&mlp);
            let trace = host.forward(&x, rows);
            let gradients = host.backward(&trace, &upstream);

            let params: Vec<Tensor<Diff, 3>> =
                mlp.params().into_iter().map(|p| p.require_grad()).collect();
            let tracked = mlp.with_params(params.clone());
            let input = Tensor::<Diff, 3>::from_data(TensorData::new(x, [3, rows, 5]), &device);
            let y = tracked.forward(input);
            let weights =
                Tensor::<Diff, 3>::from_data(TensorData::new(upstream, [3, rows, 4]), &device);
            let grads = (y.clone() * weights).sum_all().backward();
            let close = |a: &[f32], b: Vec<f32>, what: &str| {
                let worst = max_abs_difference(a, &b);
                assert!(worst < 1e-5, "{activation:?} {what}: {worst}");
            };
            close(&trace.output, to_host_f32(y), "output");
            let expected: Vec<Vec<f32>> = params
                .iter()
                .map(|p| to_host_f32(p.grad(&grads).expect("a gradient")))
                .collect();
            for (l, g) in gradients.iter().enumerate() {
                close(&g.weight, expected[2 * l].clone(), "weight gradient");
                close(&g.bias, expected[2 * l + 1].clone(), "bias gradient");
            }
        }
    }

    #[test]
    fn repeat_descend_and_round_trip() {
        let device = Default::default();
        let one = EnsembleMlp::<NdArray<f32>>::new(
            Init::TorchDefault,
            Activation::Tanh,
            1,
            &[3, 4, 2],
            5,
            &device,
        );
        let host = HostMlp::from_ensemble(&one).repeat(3);
        assert_eq!(host.members, 3);
        let back = HostMlp::from_ensemble(&host.to_ensemble::<NdArray<f32>>(&device));
        assert_eq!(back.layers, host.layers);
        let mut moved = host.clone();
        let ones: Vec<HostLayer> = host
            .layers
            .iter()
            .map(|l| HostLayer {
                weight: vec![1.0; l.weight.len()],
                bias: vec![2.0; l.bias.len()],
                ..*l
            })
            .collect();
        moved.descend(&ones, 0.5);
        assert_eq!(moved.layers[0].weight[0], host.layers[0].weight[0] - 0.5);
        assert_eq!(moved.layers[1].bias[1], host.layers[1].bias[1] - 1.0);
    }

    #[test]
    fn the_fused_adam_step_is_backward_then_member_adam() {
        use crate::optim::{AdamConfig, MemberAdam};
        let device = Default::default();
        let config = AdamConfig {
            beta1: 0.7,
            weight_decay: 0.01,
            ..AdamConfig::default()
        };
        // One row per member (the GAN generator's form, and wide enough that the layers are
        // split over the cores) and several rows (the discriminator's).
        for (widths, rows) in [(&[1100usize, 400, 1000][..], 1usize), (&[2, 9, 1][..], 33)] {
            let members = 3;
            let mlp = EnsembleMlp::<NdArray<f32>>::new(
                Init::TorchDefault,
                Activation::LeakyRelu(0.2),
                members,
                widths,
                7,
                &device,
            );
            let (fan_in, fan_out) = (widths[0], widths[widths.len() - 1]);
            let mut fused = HostMlp::from_ensemble(&mlp);
            let mut adam = HostAdam::new(config, &fused);
            let mut params = mlp.params();
            let mut reference = MemberAdam::<NdArray<f32>>::unfused(config, members, &device);
            let lr = Tensor::full([1, 1, 1], 0.01, &device);
            for step in 0..3 {
                let x: Vec<f32> = (0..members * rows * fan_in)
                    .map(|i| ((i + step) as f32 * 0.13).sin())
                    .collect();
                let upstream: Vec<f32> = (0..members * rows * fan_out)
                    .map(|i| ((i * 3 + step) as f32 * 0.29).cos())
                    .collect();
                let tensors =
                    EnsembleMlp::<NdArray<f32>>::from_params(params.clone(), fused.activation);
                let host = HostMlp::from_ensemble(&tensors);
                let trace = host.forward(&x, rows);
                let input = float_tensor(x.clone(), [members, rows, fan_in], &device);
                let worst = max_abs_difference(&trace.output, &to_host_f32(tensors.forward(input)));
                assert!(
                    worst < 1e-4,
                    "{widths:?} step {step} forward against tensors: {worst}"
                );
                let grads = layer_tensors::<NdArray<f32>>(
                    &host.backward(&trace, &upstream),
                    members,
                    &device,
                );
                params = reference.step(params, grads, lr.clone(), None);
                // Adam moves each weight by about lr whatever its gradient's size, so 1e-5 is
                // a thousandth of a step (momentum nearly cancelling a gradient of the other
                // sign amplifies rounding beyond one ulp).
                for (got, want) in fused.layers.iter().zip(&host.layers) {
                    let worst = max_abs_difference(&got.weight, &want.weight)
                        .max(max_abs_difference(&got.bias, &want.bias));
                    assert!(worst < 1e-5, "{widths:?} before step {step}: {worst}");
                }
                let trace = fused.forward(&x, rows);
                fused.adam_step(&trace, &upstream, &mut adam, 0.01);
            }
            let want = HostMlp::from_ensemble(&EnsembleMlp::<NdArray<f32>>::from_params(
                params,
                fused.activation,
            ));
            for (got, want) in fused.layers.iter().zip(&want.layers) {
                let worst = max_abs_difference(&got.weight, &want.weight)
                    .max(max_abs_difference(&got.bias, &want.bias));
                assert!(worst < 1e-5, "{widths:?}: {worst}");
            }
        }
    }
}
