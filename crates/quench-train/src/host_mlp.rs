//! Member MLPs in host memory with a hand-derived backward: the CPU backend's form of a small
//! network's training step, where autodiff's graph of per-layer ops (and the copies behind
//! it) costs more than the arithmetic, as for a meta-learning policy adapted per task (16
//! members of about 38k parameters, one input row each).

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use quench_device::readback::{float_tensor, to_host_f32};

use crate::ensemble::{Activation, EnsembleMlp};

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
    /// Rows per member.
    rows: usize,
    /// The network's output `[members, rows, widths.last()]`.
    pub output: Vec<f32>,
}

impl Activation {
    fn host(self, x: f32) -> f32 {
        match self {
            Self::Relu => x.max(0.0),
            Self::Tanh => x.tanh(),
            Self::LeakyRelu(slope) => {
                if x >= 0.0 {
                    x
                } else {
                    slope as f32 * x
                }
            }
        }
    }

    /// The derivative at pre-activation `pre`, whose activation is `post`.
    fn host_slope(self, pre: f32, post: f32) -> f32 {
        match self {
            Self::Relu => f32::from(u8::from(pre > 0.0)),
            Self::Tanh => 1.0 - post * post,
            Self::LeakyRelu(slope) => {
                if pre >= 0.0 {
                    1.0
                } else {
                    slope as f32
                }
            }
        }
    }
}

impl HostMlp {
    /// The values of `mlp` (one device-to-host copy per tensor).
    pub fn from_ensemble<B: Backend>(mlp: &EnsembleMlp<B>) -> Self {
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
    pub fn to_ensemble<B: Backend>(&self, device: &B::Device) -> EnsembleMlp<B> {
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

    /// Applies every member to its own `rows` rows of `x` `[members, rows, fan_in]`.
    pub fn forward(&self, x: &[f32], rows: usize) -> Trace {
        let last = self.layers.len().saturating_sub(1);
        let mut inputs = Vec::with_capacity(self.layers.len());
        let mut pre = Vec::with_capacity(last);
        let mut h = x.to_vec();
        for (l, layer) in self.layers.iter().enumerate() {
            let (fan_in, fan_out) = (layer.fan_in, layer.fan_out);
            let mut z = vec![0.0f32; self.members * rows * fan_out];
            for m in 0..self.members {
                let w = &layer.weight[m * fan_in * fan_out..(m + 1) * fan_in * fan_out];
                let b = &layer.bias[m * fan_out..(m + 1) * fan_out];
                for r in 0..rows {
                    let row = (m * rows + r) * fan_in;
                    let out = &mut z[(m * rows + r) * fan_out..(m * rows + r + 1) * fan_out];
                    out.copy_from_slice(b);
                    // Row by row of W, so that the inner loop runs along contiguous outputs.
                    for (&xi, w_row) in h[row..row + fan_in].iter().zip(w.chunks_exact(fan_out)) {
                        out.iter_mut().zip(w_row).for_each(|(o, &wi)| *o += xi * wi);
                    }
                }
            }
            let next = if l < last {
                let post = z.iter().map(|&v| self.activation.host(v)).collect();
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
            rows,
            output: h,
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
                let (pre, post) = (&trace.pre[l - 1], input);
                below
                    .iter_mut()
                    .zip(pre.iter().zip(post))
                    .for_each(|(b, (&p, &h))| *b *= self.activation.host_slope(p, h));
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
pub fn layer_tensors<B: Backend>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::Init;
    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::TensorData;
    use quench_device::stats::max_abs_difference;

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
            let grads = (y.clone() * weights).sum().backward();
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
}
