//! A frozen ResNet18 backbone: the feature extractor of the hybrid quantum-classical MNIST
//! classifier (guide 003).
//!
//! The architecture is torchvision's `resnet18` (BasicBlock, `[2, 2, 2, 2]`) with the stem
//! convolution replaced by a one-channel `Conv2d(1, 64, 7, stride 2, padding 3, bias=False)` and
//! the final `fc` removed, so a batch of MNIST images `[batch, 1, 28, 28]` becomes the pooled
//! features `[batch, 512]`. The field names follow torchvision's `state_dict` keys (`conv1`,
//! `bn1`, `layer1` ... `layer4`, blocks `conv1`, `bn1`, `conv2`, `bn2`, `downsample`), so a
//! torchvision `state_dict` (safetensors or `torch.save`) loads through burn-store with the
//! renames `downsample.0` / `downsample.1` to `downsample.conv` / `downsample.bn` and, in the
//! BatchNorms, `weight` / `bias` to `gamma` / `beta`. Produce one with
//!
//! ```python
//! m = torchvision.models.resnet18(); m.conv1 = nn.Conv2d(1, 64, 7, 2, 3, bias=False)
//! ...  # train, or load one-channel weights
//! safetensors.torch.save_file(m.state_dict(), "resnet18_mnist.safetensors")  # or torch.save
//! ```
//!
//! The backbone is never trained: [`ResNet18::forward`] always normalises with the
//! BatchNorm running statistics (PyTorch's `eval()` mode) whatever the backend, and every
//! parameter is marked as not requiring gradients.

use quench_kernels::QuenchOps;
use quench_kernels::ops::conv::{ConvAffine, PatchRows, conv_patches};
use quench_kernels::ops::view::ViewTo;
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use burn::module::{Module, Param, RunningState};
use burn::nn::conv::Conv2d;
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{DType, Element, Tensor, TensorData};
use burn_store::{
    ApplyError, ModuleAdapter, ModuleSnapshot, ModuleStore, PytorchStore, SafetensorsStore,
    TensorSnapshot,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, StandardNormal};
use thiserror::Error;

/// Width of the pooled features: the output channels of `layer4`.
pub const FEATURES: usize = 512;

/// The most images [`ResNet18::forward`] runs at once; larger batches go in chunks of this
/// size (the fastest size measured on the 2-core CPU: 16 or 32 are slower per image, and so is
/// 256 at once).
pub const FORWARD_CHUNK: usize = 64;

/// A failure to load backbone weights; every variant names the file.
#[derive(Debug, Error)]
pub enum ResNetError {
    /// The file could not be opened or read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file is neither a readable safetensors file nor a readable PyTorch checkpoint.
    #[error("{}: not a readable {format} file: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// The format the first bytes suggested ("safetensors" or "PyTorch").
        format: &'static str,
        /// What the reader said.
        message: String,
    },
    /// A tensor has another shape than the backbone's parameter of that name.
    #[error(
        "{}: tensor {key} has shape {found:?}, the one-channel ResNet18 expects {expected:?}",
        path.display()
    )]
    Shape {
        /// The file.
        path: PathBuf,
        /// The tensor's key, in torchvision's naming.
        key: String,
        /// The shape of the backbone's parameter.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor was found but its data could not be read or converted.
    #[error("{}: tensor {key}: {message}", path.display())]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor's key, in torchvision's naming.
        key: String,
        /// What went wrong.
        message: String,
    },
    /// Parameters or running statistics of the backbone are absent from the file; loading
    /// anyway would leave them at their placeholder values.
    #[error("{}: {} backbone tensor(s) missing: {}", path.display(), keys.len(), keys.join(", "))]
    Missing {
        /// The file.
        path: PathBuf,
        /// The absent keys, in torchvision's naming.
        keys: Vec<String>,
    },
    /// The file holds tensors that belong to no parameter of the backbone (besides `fc.*` and
    /// `num_batches_tracked`, which are skipped): most likely another architecture.
    #[error("{}: {} tensor(s) not part of the backbone: {}", path.display(), keys.len(), keys.join(", "))]
    Unexpected {
        /// The file.
        path: PathBuf,
        /// The unused keys, in torchvision's naming.
        keys: Vec<String>,
    },
}

/// The projection of a block's input when its shape changes (torchvision's `downsample`, a
/// `Sequential` of a 1x1 convolution and a BatchNorm, keys `downsample.0` and `downsample.1`).
#[derive(Module, Debug)]
pub struct Downsample<B: QuenchOps> {
    /// 1x1 convolution with the block's stride, no bias: `[out, in, 1, 1]`.
    pub conv: Conv2d<B>,
    /// BatchNorm over the `out` channels.
    pub bn: BatchNorm<B>,
}

/// torchvision's `BasicBlock`: two 3x3 convolutions with BatchNorm and a residual connection.
#[derive(Module, Debug)]
pub struct BasicBlock<B: QuenchOps> {
    /// 3x3 convolution with the block's stride, padding 1, no bias: `[out, in, 3, 3]`.
    pub conv1: Conv2d<B>,
    /// BatchNorm after `conv1`.
    pub bn1: BatchNorm<B>,
    /// 3x3 convolution, stride 1, padding 1, no bias: `[out, out, 3, 3]`.
    pub conv2: Conv2d<B>,
    /// BatchNorm after `conv2`.
    pub bn2: BatchNorm<B>,
    /// Projection of the input, present when the stride is not 1 or the width changes.
    pub downsample: Option<Downsample<B>>,
}

/// The ResNet18 backbone with a one-channel stem and no classifier head: images
/// `[batch, 1, height, width]` to features `[batch, 512]` (built for MNIST's 28x28).
#[derive(Module, Debug)]
pub struct ResNet18<B: QuenchOps> {
    /// Stem: 7x7 convolution, 1 -> 64 channels, stride 2, padding 3, no bias.
    pub conv1: Conv2d<B>,
    /// BatchNorm after the stem.
    pub bn1: BatchNorm<B>,
    /// 3x3 max pooling, stride 2, padding 1.
    pub maxpool: MaxPool2d,
    /// Two blocks of 64 channels, stride 1.
    pub layer1: Vec<BasicBlock<B>>,
    /// Two blocks of 128 channels, the first with stride 2.
    pub layer2: Vec<BasicBlock<B>>,
    /// Two blocks of 256 channels, the first with stride 2.
    pub layer3: Vec<BasicBlock<B>>,
    /// Two blocks of 512 channels, the first with stride 2.
    pub layer4: Vec<BasicBlock<B>>,
    /// Average over the remaining spatial positions.
    pub avgpool: AdaptiveAvgPool2d,
}

/// Channels and stride of the first block of each stage; the second block keeps both.
const STAGES: [(usize, usize); 4] = [(64, 1), (128, 2), (256, 2), (512, 2)];

/// A convolution without bias whose weight of `shape` `[out, in, k, k]` has `values` in that
/// (PyTorch's) order, stored tap-major (see [`tap_major`]).
fn conv<B: QuenchOps>(
    values: &[f32],
    shape: [usize; 4],
    stride: usize,
    padding: usize,
    device: &B::Device,
) -> Conv2d<B> {
    let k = shape[2];
    Conv2d {
        weight: Param::from_tensor(tap_major(values, shape, device)),
        bias: None,
        stride: [stride, stride],
        kernel_size: [k, k],
        dilation: [1, 1],
        groups: 1,
        padding: PaddingConfig2d::Explicit(padding, padding, padding, padding),
    }
}

/// BatchNorm with torchvision's defaults: gamma 1, beta 0, running statistics (0, 1), eps 1e-5.
fn batch_norm<B: QuenchOps>(channels: usize, device: &B::Device) -> BatchNorm<B> {
    BatchNormConfig::new(channels).init(device)
}

/// A weight of `shape` `[out, in, k, k]` with `values` in that order, as a tensor of that
/// shape whose data is laid out as `[k, k, in, out]` (a permuted view of that array), so that
/// [`conv_grid`] gets its `[k * k * in, out]` matrix by permuting back and reshaping, without
/// copying 11 million weights on every forward pass. The reordering is a host loop: Burn's
/// permute-and-read-back of all weights takes about 0.4 s on the CPU.
fn tap_major<B: QuenchOps>(values: &[f32], shape: [usize; 4], device: &B::Device) -> Tensor<B, 4> {
    let [out, channels, k, _] = shape;
    let mut reordered = vec![0.0; values.len()];
    // One kernel per (output, input) channel pair, in that order.
    for (pair, kernel) in values.chunks_exact(k * k).enumerate() {
        let (o, c) = (pair / channels, pair % channels);
        for (tap, value) in kernel.iter().enumerate() {
            reordered[(tap * channels + c) * out + o] = *value;
        }
    }
    Tensor::<B, 4>::from_data(TensorData::new(reordered, [k, k, channels, out]), device)
        .permute([3, 2, 0, 1])
}

/// Activations between layers, channels last: `x` is `[batch, height * width, channels]`.
///
/// Why the residual stages do not use Burn's `conv2d`: burn-ndarray computes convolutions
/// directly, parallel over images and blocks of output channels, which is slow for ResNet's
/// many channels on MNIST's few positions (7x7 down to 1x1), and its output is a
/// channels-last array behind a permuted view, on which the following element-wise operations
/// are slow again. Gathering the patches and multiplying by the weight matrix turns each
/// convolution into one large matrix product (`QuenchOps::conv_patches`, the stem's 7x7 window
/// on one channel included). For 64 images on a 2-core CPU the backbone took about 0.08 s this
/// way with Burn's ops, 0.41 s with burn::nn's modules throughout; the operation's host kernel
/// (product, BatchNorm, residual and ReLU in one pass) is faster again (docs/benchmarks.md).
#[derive(Debug, Clone)]
struct Grid<B: QuenchOps> {
    x: Tensor<B, 3>,
    height: usize,
    width: usize,
}

impl<B: QuenchOps> Grid<B> {
    /// The grid of `x` `[batch, channels, h, w]`. Burn's direct convolution on the CPU leaves
    /// its output laid out channels-last behind a permuted view, so this is usually a view too.
    fn from_channels_first(x: Tensor<B, 4>) -> Self {
        let [batch, channels, height, width] = x.dims();
        Self {
            x: x.permute([0, 2, 3, 1])
                .view_to([batch, height * width, channels]),
            height,
            width,
        }
    }

    /// `f` applied to the grid seen as `[batch, channels, h, w]` (a permuted view), for Burn's
    /// modules that take that shape.
    fn through_channels_first(self, f: impl FnOnce(Tensor<B, 4>) -> Tensor<B, 4>) -> Self {
        let [batch, _, channels] = self.x.dims();
        let x = self
            .x
            .view_to([batch, self.height, self.width, channels])
            .permute([0, 3, 1, 2]);
        Self::from_channels_first(f(x))
    }

    fn map(self, f: impl FnOnce(Tensor<B, 3>) -> Tensor<B, 3>) -> Self {
        Self {
            x: f(self.x),
            ..self
        }
    }
}

/// `conv` applied to `grid` as one patch product ([`conv_patches`]: the patches `[batch *
/// cells, taps * in]` times the weight `[taps * in, out]`), then `scale` and `shift` per
/// output channel, the `residual` and ReLU where `rectify`. ResNet pads every convolution by
/// half its kernel.
fn conv_grid<B: QuenchOps>(
    conv: &Conv2d<B>,
    grid: Grid<B>,
    [scale, shift]: [Tensor<B, 1>; 2],
    residual: Option<Tensor<B, 3>>,
    rectify: bool,
) -> Grid<B> {
    let patches = patches_of(conv, &grid);
    let affine = ConvAffine {
        weight: patch_weight(conv, &patches, &grid.x.device()),
        scale,
        shift,
    };
    apply_patches(&patches, &affine, grid, residual, rectify)
}

/// The patch layout of `conv` on `grid`.
fn patches_of<B: QuenchOps>(conv: &Conv2d<B>, grid: &Grid<B>) -> PatchRows {
    let kernel = conv.weight.dims()[2];
    PatchRows::new(grid.height, grid.width, kernel, conv.stride[0], kernel / 2)
}

/// `conv`'s weight `[out, in, k, k]` as the patch product's `[taps * in, out]`, the rows of
/// the taps `patches` keeps (a tap that reads only padding everywhere is dropped).
fn patch_weight<B: QuenchOps>(
    conv: &Conv2d<B>,
    patches: &PatchRows,
    device: &B::Device,
) -> Tensor<B, 2> {
    let [out, channels, kernel, _] = conv.weight.dims();
    let weight = conv
        .weight
        .val()
        .permute([2, 3, 1, 0])
        .reshape_to([kernel * kernel * channels, out]);
    if patches.taps.len() == kernel * kernel {
        return weight;
    }
    let kept: Vec<i64> = patches
        .taps
        .iter()
        .flat_map(|&t| (t * channels..(t + 1) * channels).map(|r| r as i64))
        .collect();
    let len = kept.len();
    weight.select(0, Tensor::from_data(TensorData::new(kept, [len]), device))
}

/// The patch product of `affine` on `grid` laid out as `patches`, then the residual and ReLU.
fn apply_patches<B: QuenchOps>(
    patches: &PatchRows,
    affine: &ConvAffine<B>,
    grid: Grid<B>,
    residual: Option<Tensor<B, 3>>,
    rectify: bool,
) -> Grid<B> {
    Grid {
        x: conv_patches(grid.x, patches, affine, residual, rectify),
        height: patches.out_height,
        width: patches.out_width,
    }
}

/// The step [`ResNet18::forward_with`] takes through each convolution: the convolution, its
/// BatchNorm, then the residual (if any) added and ReLU where asked.
trait ConvLayer<B: QuenchOps> {
    fn apply(
        &mut self,
        conv: &Conv2d<B>,
        bn: &BatchNorm<B>,
        x: Grid<B>,
        residual: Option<Tensor<B, 3>>,
        rectify: bool,
    ) -> Grid<B>;
}

/// Inference: each BatchNorm with its running statistics, folded into its convolution's
/// product with the residual and ReLU (one operation per convolution). The product's weights
/// (the convolution's permuted into patch order, and the folded BatchNorm) are made at the
/// first pass and kept for the passes after it: a copy of all 11M weights per batch of images
/// otherwise (a tenth of the hybrid workload's time, in a profile).
pub struct Inference<B: QuenchOps> {
    /// Per convolution in the order a pass applies them: its patch layout's taps and the
    /// product's weights.
    prepared: Vec<(Vec<usize>, ConvAffine<B>)>,
    /// The convolution the pass reaches next.
    next: usize,
}

impl<B: QuenchOps> Default for Inference<B> {
    fn default() -> Self {
        Self {
            prepared: Vec::new(),
            next: 0,
        }
    }
}

impl<B: QuenchOps> ConvLayer<B> for Inference<B> {
    fn apply(
        &mut self,
        conv: &Conv2d<B>,
        bn: &BatchNorm<B>,
        x: Grid<B>,
        residual: Option<Tensor<B, 3>>,
        rectify: bool,
    ) -> Grid<B> {
        let patches = patches_of(conv, &x);
        let at = self.next;
        self.next += 1;
        // Another image size keeps other taps: made again for it.
        if self
            .prepared
            .get(at)
            .is_none_or(|(taps, _)| *taps != patches.taps)
        {
            let [scale, shift] = fold(bn, bn.running_mean.value(), bn.running_var.value());
            let affine = ConvAffine {
                weight: patch_weight(conv, &patches, &x.x.device()),
                scale,
                shift,
            };
            let entry = (patches.taps.clone(), affine);
            match self.prepared.get_mut(at) {
                Some(slot) => *slot = entry,
                None => self.prepared.push(entry),
            }
        }
        apply_patches(&patches, &self.prepared[at].1, x, residual, rectify)
    }
}

/// Each BatchNorm through a closure on the convolution's output `[batch, positions,
/// channels]` (calibration's batch statistics, tests' checks).
struct Normalised<F>(F);

impl<B: QuenchOps, F: FnMut(&BatchNorm<B>, Tensor<B, 3>) -> Tensor<B, 3>> ConvLayer<B>
    for Normalised<F>
{
    fn apply(
        &mut self,
        conv: &Conv2d<B>,
        bn: &BatchNorm<B>,
        x: Grid<B>,
        residual: Option<Tensor<B, 3>>,
        rectify: bool,
    ) -> Grid<B> {
        let out = conv.weight.dims()[0];
        let device = x.x.device();
        let identity = [Tensor::ones([out], &device), Tensor::zeros([out], &device)];
        conv_grid(conv, x, identity, None, false).map(|y| {
            let y = (self.0)(bn, y);
            let y = match residual {
                Some(r) => y + r,
                None => y,
            };
            if rectify { relu(y) } else { y }
        })
    }
}

/// `x` `[batch, positions, channels]` normalised per channel with `mean` and `var`
/// `[channels]`, then scaled by `bn`'s gamma and shifted by its beta:
/// `(x - mean) / sqrt(var + eps) * gamma + beta`, folded into one scale and one shift so that
/// the activations are read twice instead of four times.
fn normalise<B: QuenchOps>(
    bn: &BatchNorm<B>,
    x: Tensor<B, 3>,
    mean: Tensor<B, 1>,
    var: Tensor<B, 1>,
) -> Tensor<B, 3> {
    let channels = mean.dims()[0];
    let [scale, shift] = fold(bn, mean, var);
    x * scale.reshape_to([1, 1, channels]) + shift.reshape_to([1, 1, channels])
}

/// `bn` with statistics `mean` and `var` `[channels]` as one scale and one shift per channel:
/// `gamma / sqrt(var + eps)` and `beta - mean * scale`.
fn fold<B: QuenchOps>(
    bn: &BatchNorm<B>,
    mean: Tensor<B, 1>,
    var: Tensor<B, 1>,
) -> [Tensor<B, 1>; 2] {
    let scale = bn.gamma.val() / (var + bn.epsilon).sqrt();
    let shift = bn.beta.val() - mean * scale.clone();
    [scale, shift]
}

/// Per-channel mean and biased variance of `x` `[batch, positions, channels]` over the batch
/// and positions: the statistics PyTorch's BatchNorm normalises with in training mode.
fn batch_statistics<B: QuenchOps>(x: Tensor<B, 3>) -> (Tensor<B, 1>, Tensor<B, 1>) {
    let channels = x.dims()[2];
    let mean = x.clone().mean_along(0).mean_along(1);
    let var = (x - mean.clone()).square().mean_along(0).mean_along(1);
    (mean.reshape_to([channels]), var.reshape_to([channels]))
}

impl<B: QuenchOps> BasicBlock<B> {
    /// The block with weights from `weight` (called for `conv1`, `conv2`, then the downsample
    /// convolution) and default BatchNorms.
    fn build(
        in_channels: usize,
        out_channels: usize,
        stride: usize,
        weight: &mut impl FnMut([usize; 4]) -> Vec<f32>,
        device: &B::Device,
    ) -> Self {
        let mut conv = |shape: [usize; 4], stride, padding| {
            conv(&weight(shape), shape, stride, padding, device)
        };
        let conv1 = conv([out_channels, in_channels, 3, 3], stride, 1);
        let conv2 = conv([out_channels, out_channels, 3, 3], 1, 1);
        let downsample = (stride != 1 || in_channels != out_channels).then(|| Downsample {
            conv: conv([out_channels, in_channels, 1, 1], stride, 0),
            bn: batch_norm(out_channels, device),
        });
        Self {
            conv1,
            bn1: batch_norm(out_channels, device),
            conv2,
            bn2: batch_norm(out_channels, device),
            downsample,
        }
    }

    /// The block applied to `x`, each convolution through `layer` in the order `conv1`,
    /// `downsample.conv`, `conv2` (the order of [`ResNet18::batch_norms_mut`]).
    fn forward_with(&self, x: Grid<B>, layer: &mut impl ConvLayer<B>) -> Grid<B> {
        let out = layer.apply(&self.conv1, &self.bn1, x.clone(), None, true);
        let identity = match &self.downsample {
            Some(down) => layer.apply(&down.conv, &down.bn, x, None, false).x,
            None => x.x,
        };
        layer.apply(&self.conv2, &self.bn2, out, Some(identity), true)
    }
}

impl<B: QuenchOps> ResNet18<B> {
    /// The backbone with convolution weights from `weight` (called in forward order with each
    /// weight's shape `[out, in, k, k]`, returning the values in that order) and default
    /// BatchNorms, frozen.
    fn build(device: &B::Device, mut weight: impl FnMut([usize; 4]) -> Vec<f32>) -> Self {
        let stem = CONV1_SHAPE;
        let conv1 = conv(&weight(stem), stem, 2, 3, device);
        let mut in_channels = 64;
        let [layer1, layer2, layer3, layer4] = STAGES.map(|(channels, stride)| {
            let first = BasicBlock::build(in_channels, channels, stride, &mut weight, device);
            let second = BasicBlock::build(channels, channels, 1, &mut weight, device);
            in_channels = channels;
            vec![first, second]
        });
        Self {
            conv1,
            bn1: batch_norm(64, device),
            maxpool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            layer1,
            layer2,
            layer3,
            layer4,
            avgpool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
        }
        .no_grad()
    }

    /// A backbone with random weights drawn from `seed` as torchvision initialises them:
    /// convolutions Kaiming-normal in fan-out mode (`std = sqrt(2 / (out * k * k))`),
    /// BatchNorm gamma 1 and beta 0, running statistics (0, 1).
    ///
    /// The weights are drawn on the host from one `StdRng` stream, so the same seed gives
    /// bit-identical weights on every backend and no other draw in the process interferes.
    /// With running statistics (0, 1) the BatchNorms normalise nothing and the features hardly
    /// vary between images; call [`ResNet18::calibrate`] before using them.
    pub fn random(device: &B::Device, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        Self::build(device, |shape| {
            let [out, _, k, _] = shape;
            let std = (2.0 / (out * k * k) as f64).sqrt();
            (0..shape.iter().product::<usize>())
                .map(|_| {
                    let z: f64 = StandardNormal.sample(&mut rng);
                    (std * z) as f32
                })
                .collect()
        })
    }

    /// The backbone with the weights of a torchvision-format file at `path`: a safetensors file
    /// or a `torch.save`d `state_dict` (`.pt` / `.pth`; the format is told by the first bytes,
    /// not the extension). Keys are torchvision's (`conv1.weight`, `bn1.running_var`,
    /// `layer2.0.downsample.0.weight`, ...); `fc.*` and `*.num_batches_tracked` are skipped.
    /// Tensors in another float type are converted to the backend's.
    ///
    /// Every parameter and running statistic must be in the file with the shape of this
    /// one-channel backbone (`conv1.weight` `[64, 1, 7, 7]`; stock ImageNet weights have
    /// `[64, 3, 7, 7]` and are refused), and the file may hold nothing else.
    ///
    /// # Errors
    /// [`ResNetError`] naming the file: unreadable ([`ResNetError::Io`], [`ResNetError::Format`]),
    /// a wrong shape naming the key ([`ResNetError::Shape`]), missing or foreign tensors.
    pub fn load(path: &Path, device: &B::Device) -> Result<Self, ResNetError> {
        let snapshots = read_snapshots(path)?;
        let mut model = Self::build(device, |shape| vec![0.0; shape.iter().product()]);
        // Convolution weights have the same layout in PyTorch and Burn, and there is no
        // `Linear` to transpose: the keys (renamed by `read_snapshots`) and the float type are
        // all that need adapting.
        let adapter = ToFloatElem {
            dtype: <B::FloatElem as Element>::dtype(),
        };
        let result = model.apply(snapshots, None, Some(Box::new(adapter)), false);
        if let Some(error) = result.errors.first() {
            return Err(match error {
                ApplyError::ShapeMismatch {
                    path: key,
                    expected,
                    found,
                } => ResNetError::Shape {
                    path: path.to_path_buf(),
                    key: torchvision_key(key),
                    expected: expected.to_vec(),
                    found: found.to_vec(),
                },
                ApplyError::DTypeMismatch { path: key, .. }
                | ApplyError::AdapterError { path: key, .. }
                | ApplyError::LoadError { path: key, .. } => ResNetError::Tensor {
                    path: path.to_path_buf(),
                    key: torchvision_key(key),
                    message: error.to_string(),
                },
            });
        }
        if !result.missing.is_empty() {
            return Err(ResNetError::Missing {
                path: path.to_path_buf(),
                keys: result
                    .missing
                    .iter()
                    .map(|(key, _)| torchvision_key(key))
                    .collect(),
            });
        }
        if !result.unused.is_empty() {
            return Err(ResNetError::Unexpected {
                path: path.to_path_buf(),
                keys: result
                    .unused
                    .iter()
                    .map(|key| torchvision_key(key))
                    .collect(),
            });
        }
        // The importer stores each weight as laid out in the file, and its parameters require
        // gradients again.
        Ok(model.with_tap_major_weights(path)?.no_grad())
    }

    /// Every convolution weight re-stored tap-major (see [`tap_major`]); `path` names the
    /// file the weights came from, for the error of a weight that cannot be read back.
    fn with_tap_major_weights(mut self, path: &Path) -> Result<Self, ResNetError> {
        let mut convs = vec![("conv1".to_string(), &mut self.conv1)];
        let stages = [
            &mut self.layer1,
            &mut self.layer2,
            &mut self.layer3,
            &mut self.layer4,
        ];
        for (stage, blocks) in stages.into_iter().enumerate() {
            for (index, block) in blocks.iter_mut().enumerate() {
                let name = format!("layer{}.{index}", stage + 1);
                convs.push((format!("{name}.conv1"), &mut block.conv1));
                convs.push((format!("{name}.conv2"), &mut block.conv2));
                if let Some(down) = &mut block.downsample {
                    convs.push((format!("{name}.downsample.0"), &mut down.conv));
                }
            }
        }
        for (name, conv) in convs {
            let weight = conv.weight.val();
            let shape = weight.dims();
            let device = weight.device();
            let values = weight
                .into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .map_err(|e| ResNetError::Tensor {
                    path: path.to_path_buf(),
                    key: format!("{name}.weight"),
                    message: format!("{e:?}"),
                })?;
            conv.weight = Param::from_tensor(tap_major(&values, shape, &device));
        }
        Ok(self)
    }

    /// The BatchNorms in the order [`ResNet18::forward`] applies them: the stem's, then per
    /// block `bn1`, `downsample.bn`, `bn2`.
    fn batch_norms_mut(&mut self) -> Vec<&mut BatchNorm<B>> {
        let mut norms = vec![&mut self.bn1];
        let stages = [
            &mut self.layer1,
            &mut self.layer2,
            &mut self.layer3,
            &mut self.layer4,
        ];
        for block in stages.into_iter().flatten() {
            norms.push(&mut block.bn1);
            if let Some(down) = &mut block.downsample {
                norms.push(&mut down.bn);
            }
            norms.push(&mut block.bn2);
        }
        norms
    }

    /// The features of `images`, each convolution with its BatchNorm through `layer`.
    ///
    /// Every convolution, the stem's included, runs as a patch product on the channels-last
    /// [`Grid`] (see there why); the pooling as Burn's modules on `[batch, channels, h, w]`.
    fn forward_with(&self, images: Tensor<B, 4>, layer: &mut impl ConvLayer<B>) -> Tensor<B, 2> {
        let images = Grid::from_channels_first(images);
        let mut x = layer
            .apply(&self.conv1, &self.bn1, images, None, true)
            .through_channels_first(|y| self.maxpool.forward(y));
        let stages = [&self.layer1, &self.layer2, &self.layer3, &self.layer4];
        for block in stages.into_iter().flatten() {
            x = block.forward_with(x, layer);
        }
        let [batch, _, channels] = x.x.dims();
        x.through_channels_first(|y| self.avgpool.forward(y))
            .x
            .view_to([batch, channels])
    }

    /// The pooled features `[batch, 512]` of `images` `[batch, 1, height, width]` (MNIST:
    /// 28x28, normalised by the caller), in inference mode: every BatchNorm normalises with its
    /// running statistics, on any backend. (Burn's own `BatchNorm::forward` switches to batch
    /// statistics, and updates the running ones, on an autodiff backend.) Run it on the inner
    /// backend so that no graph is recorded.
    ///
    /// Batches larger than [`FORWARD_CHUNK`] are run in chunks of that size: each image's
    /// features depend on that image alone, and on the 2-core CPU 256 images take 0.32 s in
    /// chunks of 64 against 0.60 s at once (the patch matrices stay near the cache).
    ///
    /// # Panics
    /// If `images` has another number of channels than 1 (the stem convolution's shape check).
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.forward_kept(images, &mut Inference::default())
    }

    /// [`Self::forward`] with the product weights `kept` made by an earlier call on these
    /// weights (or made now, at the first): a data set's features call by call, each
    /// convolution's weights permuted into patch order once. Calibrating the backbone makes
    /// new ones (start from `Inference::default()` after it).
    pub fn forward_kept(&self, images: Tensor<B, 4>, kept: &mut Inference<B>) -> Tensor<B, 2> {
        let mut pass = |images| {
            kept.next = 0;
            self.forward_with(images, kept)
        };
        if images.dims()[0] <= FORWARD_CHUNK {
            return pass(images);
        }
        let chunks = images.split(FORWARD_CHUNK, 0);
        Tensor::cat(chunks.into_iter().map(pass).collect(), 0)
    }

    /// The backbone with every BatchNorm's running mean and variance set to the statistics of
    /// its input on `images` `[batch, 1, height, width]`: per channel over the batch and
    /// spatial axes, with the biased variance PyTorch normalises with. The layers are set in
    /// forward order, each later layer seeing inputs normalised by the earlier new statistics.
    ///
    /// Why: a randomly initialised backbone has running statistics (0, 1), which do not match
    /// its activations, so its BatchNorms normalise nothing. Measured on 64 unit-normal 28x28
    /// images (seed 1): the stem's fan-out initialisation shrinks the scale about six-fold,
    /// the residual additions regrow it only partly, the ReLU outputs are never re-centred, and
    /// by `layer4` each channel's spread over the batch (0.01 to 0.1) is a fraction of its
    /// offset: the features hardly vary between images. Calibrated, each BatchNorm output has
    /// mean 0 and variance 1 per channel on `images` (gamma 1, beta 0), so the features are
    /// of order 1 and differ between images as much as they vary at all. For loaded weights
    /// it replaces the file's statistics by the data's own (a domain adaptation; leave it out
    /// to keep the file's).
    ///
    /// Use a batch of at least a few dozen images: `layer4` sees 1x1 positions for 28x28
    /// inputs, so its statistics come from the batch alone.
    pub fn calibrate(mut self, images: Tensor<B, 4>) -> Self {
        let mut statistics = Vec::new();
        self.forward_with(
            images,
            &mut Normalised(|bn: &BatchNorm<B>, x: Tensor<B, 3>| {
                let (mean, var) = batch_statistics(x.clone());
                statistics.push((mean.clone(), var.clone()));
                normalise(bn, x, mean, var)
            }),
        );
        for (bn, (mean, var)) in self.batch_norms_mut().into_iter().zip(statistics) {
            bn.running_mean = RunningState::new(mean);
            bn.running_var = RunningState::new(var);
        }
        self
    }
}

/// Converts float tensors of another type (f16, bf16, f64 in the file) to the backend's, which
/// the importer would otherwise load as they are and leave the backbone with mixed types.
#[derive(Debug, Clone)]
struct ToFloatElem {
    dtype: DType,
}

impl ModuleAdapter for ToFloatElem {
    fn adapt(&self, snapshot: &TensorSnapshot) -> TensorSnapshot {
        if snapshot.dtype == self.dtype || !snapshot.dtype.is_float() {
            return snapshot.clone();
        }
        let data = snapshot.clone_data_fn();
        let dtype = self.dtype;
        TensorSnapshot::from_closure(
            Rc::new(move || Ok(data()?.convert_dtype(dtype))),
            dtype,
            snapshot.shape.clone(),
            snapshot.path_stack.clone().unwrap_or_default(),
            snapshot.container_stack.clone().unwrap_or_default(),
            snapshot.tensor_id.unwrap_or_default(),
        )
    }

    fn clone_box(&self) -> Box<dyn ModuleAdapter> {
        Box::new(self.clone())
    }
}

/// A torchvision key in this module's naming: `downsample.0` / `downsample.1` are the fields
/// `downsample.conv` / `downsample.bn`, and a BatchNorm's (`bn1`, `bn2`, `downsample.1`)
/// `weight` / `bias` are Burn's `gamma` / `beta`.
///
/// The renaming is done here rather than by burn-store's `PyTorchToBurnAdapter`: the adapter
/// finds `bn1.weight` as an alternative name of `bn1.gamma` but does not count it as used,
/// so every BatchNorm weight and bias would be reported as foreign to the backbone.
fn module_key(key: &str) -> String {
    let key = key
        .replace(".downsample.0.", ".downsample.conv.")
        .replace(".downsample.1.", ".downsample.bn.");
    let Some((module, param)) = key.rsplit_once('.') else {
        return key;
    };
    let is_norm = module
        .rsplit('.')
        .next()
        .is_some_and(|m| m.starts_with("bn"));
    match param {
        "weight" if is_norm => format!("{module}.gamma"),
        "bias" if is_norm => format!("{module}.beta"),
        _ => key,
    }
}

/// A key of this module (or of the remapped file) in torchvision's naming, for messages.
fn torchvision_key(key: &str) -> String {
    let key = key
        .replace(".downsample.conv.", ".downsample.0.")
        .replace(".downsample.bn.", ".downsample.1.");
    // Only BatchNorms have `gamma` and `beta`; PyTorch calls them `weight` and `bias`.
    match key.rsplit_once('.') {
        Some((module, "gamma")) => format!("{module}.weight"),
        Some((module, "beta")) => format!("{module}.bias"),
        _ => key,
    }
}

/// Whether the loader skips `key`: the removed classifier head and PyTorch's BatchNorm step
/// counters, which have no counterpart here.
fn skipped(key: &str) -> bool {
    key.starts_with("fc.") || key.ends_with(".num_batches_tracked")
}

/// The one-channel first convolution of the original, `[64, 1, 7, 7]`.
const CONV1_SHAPE: [usize; 4] = [64, 1, 7, 7];

/// Checks a weight file whole on the host, before any backend is chosen and any workload
/// runs: it reads as safetensors or as a PyTorch file, holds the one-channel `conv1.weight`
/// `[64, 1, 7, 7]` (stock ImageNet weights, `[64, 3, 7, 7]`, are refused first, by name), every
/// float tensor is finite, and every tensor's name and shape are the backbone's (as
/// [`ResNet18::load`] finds them, loaded once on the CPU).
///
/// # Errors
/// [`ResNetError`] naming the file: empty, unreadable, in neither format, without
/// `conv1.weight` or with another shape, a tensor holding NaN or infinity, missing or foreign
/// tensors.
pub fn check_weights(path: &Path) -> Result<(), ResNetError> {
    let snapshots = read_snapshots(path)?;
    let conv1 = snapshots
        .iter()
        .find(|s| torchvision_key(&s.full_path()) == "conv1.weight")
        .ok_or_else(|| ResNetError::Missing {
            path: path.to_path_buf(),
            keys: vec!["conv1.weight".into()],
        })?;
    let found = conv1.shape.to_vec();
    if found != CONV1_SHAPE {
        return Err(ResNetError::Shape {
            path: path.to_path_buf(),
            key: "conv1.weight".into(),
            expected: CONV1_SHAPE.to_vec(),
            found,
        });
    }
    for snapshot in &snapshots {
        let key = torchvision_key(&snapshot.full_path());
        let tensor = |message: String| ResNetError::Tensor {
            path: path.to_path_buf(),
            key: key.clone(),
            message,
        };
        let data = snapshot.to_data().map_err(|e| tensor(e.to_string()))?;
        if data.dtype.is_float() {
            let values = data.iter::<f64>();
            if let Some(bad) = values.into_iter().find(|v| !v.is_finite()) {
                return Err(tensor(format!("holds {bad}: every weight must be finite")));
            }
        }
    }
    // Every other tensor's name and shape, as the workload would load them.
    ResNet18::<burn::backend::NdArray<f32>>::load(path, &Default::default()).map(drop)
}

/// The tensors of the file at `path`, keys remapped to this module's names, skipped keys
/// dropped. A safetensors file starts with an 8-byte header length and then the JSON header's
/// `{`; anything else is handed to the PyTorch reader.
fn read_snapshots(path: &Path) -> Result<Vec<TensorSnapshot>, ResNetError> {
    let io = |source| ResNetError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut head = Vec::with_capacity(9);
    // A FIFO or device is refused, not waited on or read until it ends.
    quench_support::files::open_regular(path)
        .map_err(io)?
        .take(9)
        .read_to_end(&mut head)
        .map_err(io)?;
    let format_error = |format, message: String| ResNetError::Format {
        path: path.to_path_buf(),
        format,
        message,
    };
    if head.is_empty() {
        return Err(format_error(
            "safetensors or PyTorch",
            "the file is empty".into(),
        ));
    }
    let snapshots = if head.get(8) == Some(&b'{') {
        SafetensorsStore::from_file(path)
            .get_all_snapshots()
            .map_err(|e| format_error("safetensors", e.to_string()))?
            .clone()
    } else {
        // Contiguous index mapping would silently shift `layer1.1` to `layer1.0` when a block
        // is missing; the keys must match as they are.
        PytorchStore::from_file(path)
            .map_indices_contiguous(false)
            .get_all_snapshots()
            .map_err(|e| format_error("PyTorch", e.to_string()))?
            .clone()
    };
    Ok(snapshots
        .into_iter()
        .filter(|(key, _)| !skipped(key))
        .map(|(key, mut snapshot)| {
            // The importer matches a snapshot by its path, the key split at the dots.
            snapshot.path_stack = Some(module_key(&key).split('.').map(String::from).collect());
            snapshot
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn_store::BurnToPyTorchAdapter;
    use safetensors::Dtype;
    use safetensors::tensor::TensorView;

    type Cpu = NdArray<f32>;

    fn images(batch: usize, seed: u64) -> Tensor<Cpu, 4> {
        let mut rng = StdRng::seed_from_u64(seed);
        let values: Vec<f32> = (0..batch * 28 * 28)
            .map(|_| {
                let z: f64 = StandardNormal.sample(&mut rng);
                z as f32
            })
            .collect();
        Tensor::from_data(
            TensorData::new(values, [batch, 1, 28, 28]),
            &Default::default(),
        )
    }

    fn values<const D: usize>(tensor: Tensor<Cpu, D>) -> Vec<f32> {
        tensor.into_data().to_vec::<f32>().unwrap()
    }

    /// torchvision's `resnet18().state_dict()` keys without `fc` and `num_batches_tracked`,
    /// written out from torchvision's structure rather than from this module.
    fn torchvision_keys() -> Vec<String> {
        let norm = |prefix: &str| {
            ["weight", "bias", "running_mean", "running_var"].map(|p| format!("{prefix}.{p}"))
        };
        let mut keys = vec!["conv1.weight".to_string()];
        keys.extend(norm("bn1"));
        for stage in 1..=4 {
            for block in 0..2 {
                let b = format!("layer{stage}.{block}");
                keys.push(format!("{b}.conv1.weight"));
                keys.extend(norm(&format!("{b}.bn1")));
                keys.push(format!("{b}.conv2.weight"));
                keys.extend(norm(&format!("{b}.bn2")));
                if stage > 1 && block == 0 {
                    keys.push(format!("{b}.downsample.0.weight"));
                    keys.extend(norm(&format!("{b}.downsample.1")));
                }
            }
        }
        keys.sort();
        keys
    }

    /// `model`'s tensors under torchvision's keys, shapes and values, as f32.
    fn state_dict(model: &ResNet18<Cpu>) -> Vec<(String, Vec<usize>, Vec<f32>)> {
        model
            .collect(None, Some(Box::new(BurnToPyTorchAdapter)), false)
            .into_iter()
            .map(|s| {
                let data = s.to_data().unwrap();
                (
                    torchvision_key(&s.full_path()),
                    data.shape.to_vec(),
                    data.to_vec::<f32>().unwrap(),
                )
            })
            .collect()
    }

    /// Writes `tensors` as a safetensors file, each in `dtype` (F32 or F64), plus a classifier
    /// head and BatchNorm step counters as a torchvision `state_dict` has them.
    fn write_safetensors(path: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)], dtype: Dtype) {
        let bytes: Vec<(String, Vec<usize>, Dtype, Vec<u8>)> = tensors
            .iter()
            .map(|(key, shape, v)| {
                let bytes = match dtype {
                    Dtype::F64 => v.iter().flat_map(|x| f64::from(*x).to_le_bytes()).collect(),
                    _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                };
                (key.clone(), shape.clone(), dtype, bytes)
            })
            .chain([
                (
                    "fc.weight".into(),
                    vec![10, 512],
                    Dtype::F32,
                    vec![0; 20480],
                ),
                ("fc.bias".into(), vec![10], Dtype::F32, vec![0; 40]),
                (
                    "bn1.num_batches_tracked".into(),
                    vec![],
                    Dtype::I64,
                    vec![0; 8],
                ),
            ])
            .collect();
        let views: Vec<(String, TensorView<'_>)> = bytes
            .iter()
            .map(|(key, shape, dtype, b)| {
                (
                    key.clone(),
                    TensorView::new(*dtype, shape.clone(), b).unwrap(),
                )
            })
            .collect();
        safetensors::serialize_to_file(views, None, path).unwrap();
    }

    /// A backbone whose every BatchNorm has distinct gamma, beta and running statistics, so
    /// that a misplaced tensor changes the features.
    fn distinct_backbone() -> ResNet18<Cpu> {
        let device = Default::default();
        let mut model = ResNet18::<Cpu>::random(&device, 5).calibrate(images(32, 6));
        let mut rng = StdRng::seed_from_u64(7);
        for bn in model.batch_norms_mut() {
            let channels = bn.gamma.dims()[0];
            let mut draw = |offset: f32| {
                let v: Vec<f32> = (0..channels)
                    .map(|_| {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        offset + 0.1 * z as f32
                    })
                    .collect();
                Param::from_tensor(Tensor::from_data(TensorData::new(v, [channels]), &device))
            };
            bn.gamma = draw(1.0);
            bn.beta = draw(0.0);
        }
        model
    }

    /// The backbone computed the plain way, with burn::nn's own `forward`s on
    /// `[batch, channels, h, w]` (Burn's BatchNorm in inference mode on a non-autodiff backend).
    fn reference_forward(m: &ResNet18<Cpu>, images: Tensor<Cpu, 4>) -> Tensor<Cpu, 2> {
        let x = relu(m.bn1.forward(m.conv1.forward(images)));
        let mut x = m.maxpool.forward(x);
        for block in [&m.layer1, &m.layer2, &m.layer3, &m.layer4]
            .into_iter()
            .flatten()
        {
            let out = relu(block.bn1.forward(block.conv1.forward(x.clone())));
            let out = block.bn2.forward(block.conv2.forward(out));
            let identity = match &block.downsample {
                Some(down) => down.bn.forward(down.conv.forward(x)),
                None => x,
            };
            x = relu(out + identity);
        }
        m.avgpool.forward(x).flatten(1, 3)
    }

    #[test]
    fn resnet_forward_equals_burn_nn_modules_forward() {
        let model = distinct_backbone();
        for batch in [1, 6] {
            let x = images(batch, 11);
            let fast = values(model.forward(x.clone()));
            let reference = values(reference_forward(&model, x));
            let scale = reference.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let diff = fast
                .iter()
                .zip(&reference)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(diff <= 1e-5 * scale.max(1.0), "{diff} (scale {scale})");
        }
    }

    #[test]
    fn kept_weights_serve_later_calls_and_are_made_again_for_another_image_size() {
        let model = distinct_backbone();
        let mut kept = Inference::default();
        // 12 x 12 images keep other taps in the later stages than 28 x 28 ones.
        for side in [28, 12, 28] {
            let x = images(2, 5).narrow(2, 0, side).narrow(3, 0, side);
            let with_kept = values(model.forward_kept(x.clone(), &mut kept));
            // The same products on the same weights: the same values, bit for bit.
            assert_eq!(with_kept, values(model.forward(x)), "{side} x {side}");
        }
    }

    #[test]
    fn resnet_features_have_the_batch_and_512_columns() {
        let model = ResNet18::<Cpu>::random(&Default::default(), 1);
        assert_eq!(model.forward(images(3, 2)).dims(), [3, FEATURES]);
        // Larger batches run in chunks; each image's features are its own.
        let x = images(FORWARD_CHUNK + 3, 2);
        let whole = values(model.forward(x.clone()));
        let last = values(model.forward(x.narrow(0, FORWARD_CHUNK, 3)));
        assert_eq!(whole.len(), (FORWARD_CHUNK + 3) * FEATURES);
        let tail = &whole[FORWARD_CHUNK * FEATURES..];
        let diff = tail
            .iter()
            .zip(&last)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff < 1e-5, "{diff}");
        // torchvision's resnet18 without `fc` has 11 176 512 parameters; the one-channel stem
        // has 64 * 49 weights instead of 64 * 3 * 49, and Burn also counts the running mean and
        // variance of the 4800 BatchNorm channels.
        assert_eq!(model.num_params(), 11_176_512 - 64 * 2 * 49 + 2 * 4800);
    }

    #[test]
    fn resnet_same_seed_same_features_other_seed_other_features() {
        let device = Default::default();
        let x = images(4, 2);
        let a = values(ResNet18::<Cpu>::random(&device, 9).forward(x.clone()));
        let b = values(ResNet18::<Cpu>::random(&device, 9).forward(x.clone()));
        let c = values(ResNet18::<Cpu>::random(&device, 10).forward(x));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let w = |seed| {
            values(
                ResNet18::<Cpu>::random(&device, seed).layer4[1]
                    .conv2
                    .weight
                    .val(),
            )
        };
        assert_eq!(w(9), w(9));
        // Kaiming fan-out: std sqrt(2 / (512 * 9)) for layer4's 3x3 convolutions.
        let weights = w(9);
        let var = weights.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / weights.len() as f64;
        assert!(
            (var.sqrt() / (2.0 / 4608.0f64).sqrt() - 1.0).abs() < 0.01,
            "{var}"
        );
    }

    #[test]
    fn resnet_calibration_normalises_every_batch_norm() {
        let x = images(64, 3);
        // The standard deviation of each feature over the batch, averaged over the features.
        let spread = |features: Tensor<Cpu, 2>| -> f32 {
            let var = features.clone() - features.mean_along(0);
            values(var.square().mean_along(0).sqrt().mean_all())[0]
        };
        let raw = ResNet18::<Cpu>::random(&Default::default(), 4);
        let raw_spread = spread(raw.forward(x.clone()));
        let model = raw.calibrate(x.clone());
        let features = values(model.forward(x.clone()));
        let scale = features.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let calibrated_spread = spread(model.forward(x.clone()));
        println!(
            "spread over images: uncalibrated {raw_spread}, calibrated {calibrated_spread}; \
             max |feature| {scale}"
        );
        assert!(features.iter().all(|v| v.is_finite()));
        assert!(scale < 20.0);
        assert!(calibrated_spread > 0.2 && calibrated_spread < 5.0);
        assert!(calibrated_spread > 5.0 * raw_spread);

        // Each BatchNorm's output on the calibration batch: mean 0, variance 1 per channel
        // (where the input varies at all; a constant channel normalises to 0).
        let mut checked = 0;
        model.forward_with(
            x,
            &mut Normalised(|bn: &BatchNorm<Cpu>, input: Tensor<Cpu, 3>| {
                let (_, in_var) = batch_statistics(input.clone());
                let out = normalise(bn, input, bn.running_mean.value(), bn.running_var.value());
                let (mean, var) = batch_statistics(out.clone());
                for ((m, v), iv) in values(mean).iter().zip(values(var)).zip(values(in_var)) {
                    assert!(m.abs() < 1e-3, "mean {m}");
                    if iv > 1e-3 {
                        assert!((v - 1.0).abs() < 1e-2, "var {v} (input var {iv})");
                    }
                }
                checked += 1;
                out
            }),
        );
        assert_eq!(checked, 20);
    }

    #[test]
    fn resnet_loads_torchvision_safetensors_into_the_right_fields() {
        let device = Default::default();
        let source = distinct_backbone();
        let tensors = state_dict(&source);
        let mut keys: Vec<String> = tensors.iter().map(|(k, _, _)| k.clone()).collect();
        keys.sort();
        assert_eq!(keys, torchvision_keys());

        let dir = tempfile::tempdir().unwrap();
        let x = images(5, 8);
        let expected = values(source.forward(x.clone()));
        for (name, dtype) in [
            ("f32.safetensors", Dtype::F32),
            ("f64.safetensors", Dtype::F64),
        ] {
            let path = dir.path().join(name);
            write_safetensors(&path, &tensors, dtype);
            let loaded = ResNet18::<Cpu>::load(&path, &device).unwrap();
            let down = |m: &ResNet18<Cpu>| {
                let down = m.layer2[0].downsample.as_ref().unwrap();
                (
                    values(down.conv.weight.val()),
                    values(down.bn.running_var.value()),
                )
            };
            assert_eq!(down(&loaded), down(&source));
            assert_eq!(
                values(loaded.layer3[1].bn2.gamma.val()),
                values(source.layer3[1].bn2.gamma.val())
            );
            assert_eq!(
                values(loaded.bn1.running_mean.value()),
                values(source.bn1.running_mean.value())
            );
            assert_eq!(values(loaded.forward(x.clone())), expected, "{name}");
        }
    }

    fn load_error(tensors: &[(String, Vec<usize>, Vec<f32>)]) -> (PathBuf, ResNetError) {
        let dir = tempfile::tempdir().unwrap().keep();
        let path = dir.join("weights.safetensors");
        write_safetensors(&path, tensors, Dtype::F32);
        let error = ResNet18::<Cpu>::load(&path, &Default::default()).unwrap_err();
        std::fs::remove_dir_all(dir).unwrap();
        (path, error)
    }

    #[test]
    fn the_host_check_passes_a_one_channel_file_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weights.safetensors");
        let mut tensors = state_dict(&ResNet18::random(&Default::default(), 1));
        write_safetensors(&path, &tensors, Dtype::F32);
        check_weights(&path).unwrap();
        tensors.retain(|(k, _, _)| k != "conv1.weight");
        write_safetensors(&path, &tensors, Dtype::F32);
        let missing = check_weights(&path).unwrap_err().to_string();
        assert!(missing.contains("conv1.weight"), "{missing}");
        tensors.push((
            "conv1.weight".into(),
            vec![64, 3, 7, 7],
            vec![0.0; 64 * 3 * 49],
        ));
        write_safetensors(&path, &tensors, Dtype::F32);
        assert!(matches!(
            check_weights(&path).unwrap_err(),
            ResNetError::Shape { found, .. } if found == [64, 3, 7, 7]
        ));
        std::fs::write(&path, b"not a weight file at all").unwrap();
        let unreadable = check_weights(&path).unwrap_err().to_string();
        assert!(unreadable.contains("weights.safetensors"), "{unreadable}");
        std::fs::write(&path, b"").unwrap();
        let empty = check_weights(&path).unwrap_err().to_string();
        assert!(empty.ends_with("the file is empty"), "{empty}");
    }

    #[test]
    fn the_host_check_reads_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weights.safetensors");
        let good = state_dict(&ResNet18::random(&Default::default(), 1));
        // A NaN deep in the file, a tensor of another shape past conv1, a foreign tensor.
        let mut nan = good.clone();
        let (key, _, values) = nan
            .iter_mut()
            .find(|(k, _, _)| k == "layer4.1.conv2.weight")
            .unwrap();
        values[7] = f32::NAN;
        let key = key.clone();
        write_safetensors(&path, &nan, Dtype::F32);
        let err = check_weights(&path).unwrap_err().to_string();
        assert!(err.contains(&key) && err.contains("NaN"), "{err}");
        let mut shape = good.clone();
        let bn = shape
            .iter_mut()
            .find(|(k, _, _)| k == "layer2.0.bn1.weight")
            .unwrap();
        *bn = (bn.0.clone(), vec![64], vec![1.0; 64]);
        write_safetensors(&path, &shape, Dtype::F32);
        assert!(matches!(
            check_weights(&path).unwrap_err(),
            ResNetError::Shape { key, .. } if key == "layer2.0.bn1.weight"
        ));
        let mut extra = good;
        extra.push(("head.weight".into(), vec![2], vec![0.0; 2]));
        write_safetensors(&path, &extra, Dtype::F32);
        let err = check_weights(&path).unwrap_err().to_string();
        assert!(err.contains("head.weight"), "{err}");
    }

    #[test]
    fn resnet_load_refuses_a_three_channel_stem_naming_the_key() {
        let mut tensors = state_dict(&ResNet18::random(&Default::default(), 1));
        let stem = tensors
            .iter_mut()
            .find(|(k, _, _)| k == "conv1.weight")
            .unwrap();
        *stem = (
            "conv1.weight".into(),
            vec![64, 3, 7, 7],
            vec![0.0; 64 * 3 * 49],
        );
        let (path, error) = load_error(&tensors);
        let message = error.to_string();
        println!("{message}");
        assert!(matches!(
            &error,
            ResNetError::Shape { key, expected, found, .. }
                if key == "conv1.weight" && expected == &[64, 1, 7, 7] && found == &[64, 3, 7, 7]
        ));
        assert!(message.contains(&path.display().to_string()));
        assert!(message.contains("conv1.weight") && message.contains("[64, 3, 7, 7]"));
    }

    #[test]
    fn resnet_load_refuses_missing_and_foreign_tensors() {
        let tensors = state_dict(&ResNet18::random(&Default::default(), 1));
        let missing: Vec<_> = tensors
            .iter()
            .filter(|(k, _, _)| k != "layer2.0.downsample.1.running_var")
            .cloned()
            .collect();
        let (_, error) = load_error(&missing);
        println!("{error}");
        assert!(matches!(
            &error,
            ResNetError::Missing { keys, .. } if keys == &["layer2.0.downsample.1.running_var"]
        ));

        let mut foreign = tensors.clone();
        foreign.push(("layer5.0.conv1.weight".into(), vec![1], vec![0.0]));
        let (_, error) = load_error(&foreign);
        println!("{error}");
        assert!(matches!(
            &error,
            ResNetError::Unexpected { keys, .. } if keys == &["layer5.0.conv1.weight"]
        ));
    }

    #[test]
    fn resnet_load_names_a_missing_or_unreadable_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.safetensors");
        let error = ResNet18::<Cpu>::load(&path, &Default::default()).unwrap_err();
        assert!(matches!(error, ResNetError::Io { .. }));
        assert!(
            error.to_string().contains(&path.display().to_string()),
            "{error}"
        );

        for (name, bytes) in [
            ("garbage.pt", b"not a checkpoint at all".to_vec()),
            (
                "truncated.safetensors",
                b"\x40\0\0\0\0\0\0\0{\"a\":".to_vec(),
            ),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            let error = ResNet18::<Cpu>::load(&path, &Default::default()).unwrap_err();
            println!("{error}");
            assert!(matches!(error, ResNetError::Format { .. }), "{error}");
            assert!(error.to_string().contains(&path.display().to_string()));
        }
    }
}
