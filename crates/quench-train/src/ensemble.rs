//! Layers and MLPs with a leading member axis: `members` independent networks applied with
//! one batched matmul per layer.

use burn::tensor::{Tensor, TensorData};
use quench_kernels::QuenchOps;
/// The nonlinearity between hidden layers (the dense operation's).
pub use quench_kernels::ops::dense::Activation;
use quench_kernels::ops::dense::{dense, layer_norm};
use quench_kernels::ops::view::ViewTo;
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;

use crate::init::{Init, LayerValues, draw_ensemble, draw_mlp};

/// `members` independent affine maps `x W + b`.
#[derive(Debug, Clone)]
pub struct EnsembleLinear<B: QuenchOps> {
    /// `[members, fan_in, fan_out]`.
    pub weight: Tensor<B, 3>,
    /// `[members, 1, fan_out]`.
    pub bias: Tensor<B, 3>,
}

impl<B: QuenchOps> EnsembleLinear<B> {
    /// The layer of `values`, of shape `[members, fan_in, fan_out]`, on `device`.
    pub fn from_values(
        values: LayerValues,
        [members, fan_in, fan_out]: [usize; 3],
        device: &B::Device,
    ) -> Self {
        Self {
            weight: Tensor::from_data(
                TensorData::new(values.weight, [members, fan_in, fan_out]),
                device,
            ),
            bias: Tensor::from_data(TensorData::new(values.bias, [members, 1, fan_out]), device),
        }
    }

    /// Applies every member to its own inputs: `[members, n, fan_in]` to `[members, n, fan_out]`.
    ///
    /// With one row per member (a meta-learning policy adapted per task) the product is a
    /// broadcast multiply and a sum over `fan_in`. On the CPU backend a batched matmul of
    /// `1 x fan_in` rows packs every weight matrix for GEMM, and its backward copies each
    /// transposed, which made it 1.4x slower end to end; on Burn 0.21's CubeCL backends the
    /// gradients through such a matmul followed by an activation came out wrong (on lavapipe,
    /// errors larger than the gradients), while this form's are right.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        self.forward_activated(x, None)
    }

    /// [`forward`](Self::forward) followed by `activation`: with several rows per member, the
    /// `QuenchOps` dense layer (on the CPU one product and one pass over its output).
    pub fn forward_activated(
        &self,
        x: Tensor<B, 3>,
        activation: Option<Activation>,
    ) -> Tensor<B, 3> {
        let [members, rows, fan_in] = x.dims();
        if rows == 1 {
            let z = (x.reshape_to([members, fan_in, 1]) * self.weight.clone()).sum_along(1)
                + self.bias.clone();
            return match activation {
                Some(a) => a.apply(z),
                None => z,
            };
        }
        dense(x, &self.weight, &self.bias, activation)
    }
}

/// `x W + b` for every member on inputs of any rank with the member axis first:
/// `x` `[members, ..., fan_in]`, `weight` `[members, fan_in, fan_out]`, `bias`
/// `[members, 1, fan_out]`; returns `[members, ..., fan_out]`. The `QuenchOps` dense layer.
pub fn member_linear<B: QuenchOps, const D: usize>(
    x: Tensor<B, D>,
    weight: &Tensor<B, 3>,
    bias: &Tensor<B, 3>,
) -> Tensor<B, D> {
    member_dense(x, weight, bias, None)
}

/// [`member_linear`] followed by `activation`, fused into one operation (the activation
/// applied where the product's values are still in cache on the CPU).
pub fn member_dense<B: QuenchOps, const D: usize>(
    x: Tensor<B, D>,
    weight: &Tensor<B, 3>,
    bias: &Tensor<B, 3>,
    activation: Option<Activation>,
) -> Tensor<B, D> {
    let dims = x.dims();
    let [members, fan_in, fan_out] = weight.dims();
    let rows = dims[1..D - 1].iter().product();
    let mut out = dims;
    out[D - 1] = fan_out;
    dense(x.view_to([members, rows, fan_in]), weight, bias, activation).view_to(out)
}

/// Layer normalisation over the last axis with per-member gain and shift (PyTorch's
/// `nn.LayerNorm`, biased variance, `eps` inside the root): `x` `[members, ..., width]`,
/// `gamma`, `beta` `[members, 1, width]`. The `QuenchOps` layer normalisation.
pub fn member_layer_norm<B: QuenchOps, const D: usize>(
    x: Tensor<B, D>,
    gamma: &Tensor<B, 3>,
    beta: &Tensor<B, 3>,
    eps: f64,
) -> Tensor<B, D> {
    let dims = x.dims();
    let [members, _, width] = gamma.dims();
    let rows = dims[1..D - 1].iter().product();
    layer_norm(x.view_to([members, rows, width]), gamma, beta, eps).view_to(dims)
}

/// `members` independent MLPs of the same widths; the activation follows every layer but the
/// last, whose output is returned raw (logits).
#[derive(Debug, Clone)]
pub struct EnsembleMlp<B: QuenchOps> {
    /// The layers, input first.
    pub layers: Vec<EnsembleLinear<B>>,
    /// The hidden nonlinearity.
    pub activation: Activation,
}

impl<B: QuenchOps> EnsembleMlp<B> {
    /// An MLP with layer widths `widths` (input first, at least two), every layer drawn with
    /// `init` ([`draw_mlp`]: layer `l` uses seed `seed + l`).
    pub fn new(
        init: Init,
        activation: Activation,
        members: usize,
        widths: &[usize],
        seed: u64,
        device: &B::Device,
    ) -> Self {
        let drawn = draw_mlp(init, members, widths, seed);
        Self::from_drawn(drawn, activation, members, widths, device)
    }

    /// The MLP of `members` members whose layers' values (`widths`, input first) were drawn
    /// on the host, one upload per parameter.
    fn from_drawn(
        drawn: Vec<LayerValues>,
        activation: Activation,
        members: usize,
        widths: &[usize],
        device: &B::Device,
    ) -> Self {
        let layers = drawn
            .into_iter()
            .zip(widths.windows(2))
            .map(|(values, w)| EnsembleLinear::from_values(values, [members, w[0], w[1]], device))
            .collect();
        Self { layers, activation }
    }

    /// Members in the ensemble.
    pub fn members(&self) -> usize {
        self.layers.first().map_or(0, |l| l.weight.dims()[0])
    }

    /// `[members, n, widths[0]]` to `[members, n, widths.last()]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        self.forward_with(x, |h| h)
    }

    /// Like [`forward`](Self::forward), applying `hidden` to every hidden activation (dropout).
    pub fn forward_with(
        &self,
        x: Tensor<B, 3>,
        mut hidden: impl FnMut(Tensor<B, 3>) -> Tensor<B, 3>,
    ) -> Tensor<B, 3> {
        let last = self.layers.len().saturating_sub(1);
        self.layers.iter().enumerate().fold(x, |h, (l, layer)| {
            if l < last {
                hidden(layer.forward_activated(h, Some(self.activation)))
            } else {
                layer.forward(h)
            }
        })
    }

    /// The parameters in a fixed order: weight then bias of every layer.
    pub fn params(&self) -> Vec<Tensor<B, 3>> {
        self.layers
            .iter()
            .flat_map(|l| [l.weight.clone(), l.bias.clone()])
            .collect()
    }

    /// [`params`](Self::params) taken out of the network, which is dropped: each parameter's
    /// buffer then has one holder, which a host kernel may update in place without a copy.
    pub fn into_params(self) -> Vec<Tensor<B, 3>> {
        self.layers
            .into_iter()
            .flat_map(|l| [l.weight, l.bias])
            .collect()
    }

    /// An MLP from its parameters (weight then bias of every layer, as [`params`](Self::params)
    /// lists them), on any backend: this is how a training step rebuilds the network from
    /// tensors that track gradients.
    pub fn from_params(params: Vec<Tensor<B, 3>>, activation: Activation) -> Self {
        let mut it = params.into_iter();
        let mut layers = Vec::new();
        while let (Some(weight), Some(bias)) = (it.next(), it.next()) {
            layers.push(EnsembleLinear { weight, bias });
        }
        Self { layers, activation }
    }

    /// The same architecture with other parameters.
    pub fn with_params(&self, params: Vec<Tensor<B, 3>>) -> Self {
        Self::from_params(params, self.activation)
    }

    /// Parameters per member.
    pub fn param_count(&self) -> usize {
        self.params()
            .iter()
            .map(|p| p.dims()[1] * p.dims()[2])
            .sum()
    }
}

/// An ensemble whose member `m` is the single network drawn from `seeds[m]` alone, so that a
/// member's initial weights do not depend on which other members share its program.
/// `seeds` must not be empty (callers validate their configuration first). The members are
/// drawn and joined on the host and each parameter uploaded once: joining them on the device
/// took a copy kernel per member and parameter (on a GPU, more launches than a short run's
/// training epochs).
pub fn seeded_ensemble<B: QuenchOps>(
    init: Init,
    activation: Activation,
    widths: &[usize],
    seeds: &[u64],
    device: &B::Device,
) -> EnsembleMlp<B> {
    let joined = draw_ensemble(init, widths, seeds);
    EnsembleMlp::from_drawn(joined, activation, seeds.len(), widths, device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type Cpu = NdArray<f32>;

    #[test]
    fn qrng_classifier_has_the_documented_parameter_count() {
        let mlp = EnsembleMlp::<Cpu>::new(
            Init::XavierUniform { gain: 1.0 },
            Activation::Relu,
            4,
            &[100, 30, 20, 3],
            1,
            &Default::default(),
        );
        assert_eq!(mlp.param_count(), 3_713);
        assert_eq!(mlp.members(), 4);
        let y = mlp.forward(Tensor::zeros([4, 7, 100], &Default::default()));
        assert_eq!(y.dims(), [4, 7, 3]);
    }

    #[test]
    fn each_member_matches_its_own_single_network() {
        let device = Default::default();
        let mlp = EnsembleMlp::<Cpu>::new(
            Init::TorchDefault,
            Activation::Tanh,
            3,
            &[5, 8, 2],
            9,
            &device,
        );
        let generator = quench_kernels::SeededGenerator::acquire::<Cpu>(&device, 4);
        let x = Tensor::<Cpu, 3>::random(
            [3, 4, 5],
            burn::tensor::Distribution::Normal(0.0, 1.0),
            &device,
        );
        drop(generator);
        let batched = mlp.forward(x.clone());
        for m in 0..3 {
            let single = mlp.with_params(
                mlp.params()
                    .into_iter()
                    .map(|p| p.narrow(0, m, 1))
                    .collect(),
            );
            let alone = single.forward(x.clone().narrow(0, m, 1));
            let diff = (alone - batched.clone().narrow(0, m, 1))
                .abs()
                .max()
                .into_scalar();
            assert!(diff < 1e-6, "member {m}: {diff}");
        }
    }

    #[test]
    fn one_row_per_member_takes_the_product_form_with_the_same_values_and_gradients() {
        use burn::backend::Autodiff;
        type Diff = Autodiff<Cpu>;
        let device = Default::default();
        let values = crate::init::draw_layers(Init::TorchDefault, 4, 6, 3, 2);
        let layer = EnsembleLinear::<Diff>::from_values(values, [4, 6, 3], &device);
        let x = Tensor::<Diff, 3>::from_data(
            TensorData::new(
                (0..24).map(|i| (i as f32 * 0.37).sin()).collect(),
                [4, 1, 6],
            ),
            &device,
        );
        let gradients = |product_form: bool| {
            let weight = layer.weight.clone().require_grad();
            let input = x.clone().require_grad();
            let tracked = EnsembleLinear {
                weight: weight.clone(),
                bias: layer.bias.clone(),
            };
            let y = if product_form {
                tracked.forward(input.clone())
            } else {
                input.clone().matmul(weight.clone()) + layer.bias.clone()
            };
            let grads = (y.clone() * y.clone()).sum_all().backward();
            [
                y.inner(),
                weight.grad(&grads).unwrap().reshape_to([4, 1, 18]),
                input.grad(&grads).unwrap(),
            ]
        };
        for (form, reference) in gradients(true).into_iter().zip(gradients(false)) {
            let diff = (form - reference).abs().max().into_scalar();
            assert!(diff < 1e-6, "{diff}");
        }
    }

    #[test]
    fn shared_weights_broadcast_over_many_members() {
        let device = Default::default();
        let one = EnsembleMlp::<Cpu>::new(
            Init::TorchDefault,
            Activation::Relu,
            1,
            &[3, 4, 2],
            1,
            &device,
        );
        let x = Tensor::<Cpu, 3>::ones([5, 2, 3], &device);
        let y = one.forward(x.clone());
        assert_eq!(y.dims(), [5, 2, 2]);
        // One row per member takes the product form; it must broadcast the same way.
        let first_rows = one.forward(x.narrow(1, 0, 1));
        let diff = (first_rows - y.narrow(1, 0, 1)).abs().max().into_scalar();
        assert!(diff < 1e-6, "{diff}");
    }
}
