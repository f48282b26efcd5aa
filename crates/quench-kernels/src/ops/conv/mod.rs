//! A convolution in inference as one patch product ([`QuenchOps::conv_patches`]): the
//! windows' input rows gathered into a patch matrix, multiplied by the weight, then the
//! BatchNorm folded into a per-channel affine map, an optional residual and ReLU. This is how
//! a frozen backbone runs ResNet's convolutions on small grids, channels last.
//!
//! The geometry ([`PatchRows`]) is computed once per layer shape on the host; the default
//! composes Burn's `select`, `matmul` and element-wise ops (what the GPU backends run, and
//! what autodiff differentiates), the CPU backend gathers and multiplies in one host kernel
//! (`conv::host`), and a CubeCL backend gathers in one kernel, multiplies by cubek's matmul
//! and applies the affine map, residual and ReLU in one more (`conv::cube`).

use burn::tensor::activation::relu;
use burn::tensor::{Int, Tensor, TensorData};

use super::QuenchOps;
use crate::views::ReshapeTo;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod cube;
pub(crate) mod host;

/// Where a `kernel` x `kernel` window with `stride` and zero `padding` (on both sides) reads
/// a `height` x `width` grid whose positions are flattened row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchRows {
    /// Positions of the input grid, `height * width`.
    pub positions: usize,
    /// Output grid height.
    pub out_height: usize,
    /// Output grid width.
    pub out_width: usize,
    /// The kernel taps (`row * kernel + column`) that read the grid at least once,
    /// ascending; the others read only padding (on a 1x1 grid, all but the centre of a 3x3
    /// kernel) and are left out of the product.
    pub taps: Vec<usize>,
    /// `[cells, taps.len()]` row-major: per output cell (row-major), per kept tap, the
    /// position read, or `positions` where the window reads padding (zeros).
    pub rows: Vec<usize>,
}

impl PatchRows {
    /// The geometry of a `kernel` x `kernel` window with `stride` and `padding` on a `height`
    /// x `width` grid. `kernel` must fit the padded grid and `stride` be at least 1 (a
    /// layer's shape, fixed by its architecture).
    ///
    /// # Panics
    /// If the window is larger than the padded grid or `stride` is 0.
    pub fn new(height: usize, width: usize, kernel: usize, stride: usize, padding: usize) -> Self {
        assert!(stride > 0, "a convolution's stride is at least 1");
        let span = |len: usize| {
            (len + 2 * padding).checked_sub(kernel).unwrap_or_else(|| {
                panic!("a {kernel}x{kernel} window does not fit {len} + 2 x {padding} padding")
            })
        };
        let out_height = span(height) / stride + 1;
        let out_width = span(width) / stride + 1;
        let read = |out: usize, tap: usize, len: usize| {
            (out * stride + tap)
                .checked_sub(padding)
                .filter(|&i| i < len)
        };
        let taps: Vec<usize> = (0..kernel * kernel)
            .filter(|t| {
                (0..out_height).any(|o| read(o, t / kernel, height).is_some())
                    && (0..out_width).any(|o| read(o, t % kernel, width).is_some())
            })
            .collect();
        let positions = height * width;
        let mut rows = Vec::with_capacity(out_height * out_width * taps.len());
        for oh in 0..out_height {
            for ow in 0..out_width {
                rows.extend(taps.iter().map(|t| {
                    match (read(oh, t / kernel, height), read(ow, t % kernel, width)) {
                        (Some(ih), Some(iw)) => ih * width + iw,
                        _ => positions,
                    }
                }));
            }
        }
        Self {
            positions,
            out_height,
            out_width,
            taps,
            rows,
        }
    }

    /// Output cells, `out_height * out_width`.
    pub fn cells(&self) -> usize {
        self.out_height * self.out_width
    }

    /// True when every cell reads its own position through one tap (a 1x1 convolution with
    /// stride 1): the patch matrix is the input itself.
    pub fn is_identity(&self) -> bool {
        self.taps.len() == 1
            && self.rows.len() == self.positions
            && self.rows.iter().enumerate().all(|(i, &r)| i == r)
    }
}

/// A convolution with the BatchNorm that follows it folded in, for [`QuenchOps::conv_patches`].
#[derive(Debug, Clone)]
pub struct ConvAffine<B: QuenchOps> {
    /// `[taps.len() * channels, out]`: row `t * channels + c` is kept tap `t`'s weights from
    /// input channel `c` (tap-major, as the patch matrix's columns).
    pub weight: Tensor<B, 2>,
    /// `[out]`: the BatchNorm's `gamma / sqrt(var + eps)`.
    pub scale: Tensor<B, 1>,
    /// `[out]`: the BatchNorm's `beta - mean * scale`.
    pub shift: Tensor<B, 1>,
}

/// The patches of `x` `[batch, positions, channels]` as `[batch, cells * taps, channels]`:
/// rows of `x` (and of a zero row where a window reads padding) in the order of
/// `patches.rows`.
pub fn gather<B: QuenchOps>(x: Tensor<B, 3>, patches: &PatchRows) -> Tensor<B, 3> {
    let [batch, positions, channels] = x.dims();
    let device = x.device();
    let x = if patches.rows.contains(&positions) {
        Tensor::cat(vec![x, Tensor::zeros([batch, 1, channels], &device)], 1)
    } else {
        x
    };
    let rows: Vec<i64> = patches.rows.iter().map(|&r| r as i64).collect();
    let len = rows.len();
    x.select(
        1,
        Tensor::<B, 1, Int>::from_data(TensorData::new(rows, [len]), &device),
    )
}

/// The default of [`QuenchOps::conv_patches`] in Burn's tensor ops.
pub fn composed_conv<B: QuenchOps>(
    x: Tensor<B, 3>,
    patches: &PatchRows,
    conv: &ConvAffine<B>,
    residual: Option<Tensor<B, 3>>,
    rectify: bool,
) -> Tensor<B, 3> {
    let [batch, _, channels] = x.dims();
    let out = conv.weight.dims()[1];
    let cells = patches.cells();
    let inner = patches.taps.len() * channels;
    let x = if patches.is_identity() {
        x
    } else {
        gather(x, patches)
    };
    let y = x
        .reshape_to([batch * cells, inner])
        .matmul(conv.weight.clone())
        .reshape_to([batch, cells, out]);
    let y =
        y * conv.scale.clone().reshape_to([1, 1, out]) + conv.shift.clone().reshape_to([1, 1, out]);
    let y = match residual {
        Some(r) => y + r,
        None => y,
    };
    if rectify { relu(y) } else { y }
}

/// `act(patches(x) W * scale + shift [+ residual])` `[batch, cells, out]` for `x` `[batch,
/// positions, channels]` ([`QuenchOps::conv_patches`]); `rectify` applies ReLU.
pub fn conv_patches<B: QuenchOps>(
    x: Tensor<B, 3>,
    patches: &PatchRows,
    conv: &ConvAffine<B>,
    residual: Option<Tensor<B, 3>>,
    rectify: bool,
) -> Tensor<B, 3> {
    B::conv_patches(x, patches, conv, residual, rectify)
}

#[cfg(test)]
mod tests {
    use burn::tensor::Distribution;

    use super::*;
    use quench_host::tensor::Host;

    #[test]
    fn patches_leave_out_taps_that_read_only_padding() {
        // A 3x3 convolution on a 1x1 grid: only the centre tap reads the grid.
        let p = PatchRows::new(1, 1, 3, 1, 1);
        assert_eq!(
            (p.out_height, p.out_width, p.taps, p.rows),
            (1, 1, vec![4], vec![0])
        );
        // 2x2 grid, stride 2: the lower-right 2x2 taps.
        let p = PatchRows::new(2, 2, 3, 2, 1);
        assert_eq!((p.taps, p.rows), (vec![4, 5, 7, 8], vec![0, 1, 2, 3]));
        // A 1x1 convolution with stride 2 on 4x4.
        let p = PatchRows::new(4, 4, 1, 2, 0);
        assert_eq!(
            (p.out_height, p.taps.clone(), p.rows.clone()),
            (2, vec![0], vec![0, 2, 8, 10])
        );
        assert!(!p.is_identity());
        assert!(PatchRows::new(3, 3, 1, 1, 0).is_identity());
        // 3x3, stride 1, padding 1 on 2x2: the first output reads padding (row 4) up and left.
        let p = PatchRows::new(2, 2, 3, 1, 1);
        assert_eq!(p.taps.len(), 9);
        assert_eq!(&p.rows[..9], &[4, 4, 4, 4, 0, 1, 4, 2, 3]);
    }

    /// A NaN in the input stays NaN through the product, the affine map and the ReLU, on
    /// the host as in the composition (Burn's ReLU passes NaN).
    #[test]
    fn a_nan_input_stays_nan_with_and_without_relu() {
        let device = Default::default();
        let patches = PatchRows::new(3, 3, 3, 1, 1);
        let mut values = vec![0.5f32; 9 * 2];
        values[8] = f32::NAN;
        let x = Tensor::<Host, 3>::from_data(TensorData::new(values, [1, 9, 2]), &device);
        let conv = ConvAffine {
            weight: Tensor::ones([patches.taps.len() * 2, 3], &device),
            scale: Tensor::ones([3], &device),
            shift: Tensor::zeros([3], &device),
        };
        for rectify in [false, true] {
            let host = conv_patches(x.clone(), &patches, &conv, None, rectify);
            let want = composed_conv(x.clone(), &patches, &conv, None, rectify);
            let nan = |t: Tensor<Host, 3>| -> Vec<bool> {
                t.into_data().iter::<f32>().map(f32::is_nan).collect()
            };
            let (host, want) = (nan(host), nan(want));
            assert_eq!(host, want, "rectify {rectify}");
            assert!(
                host.iter().any(|&n| n),
                "the NaN reaches the cells that read it"
            );
        }
    }

    /// The host kernel against the composition on every geometry a ResNet on 28x28 images
    /// has (stem, 3x3 with and without stride, padding-only taps, 1x1 downsample), with and
    /// without residual and ReLU, over a thread split.
    #[test]
    fn the_host_kernel_is_the_composition() {
        let device = Default::default();
        // Held, so that these draws do not move another test's seeded ones.
        let _generator = crate::SeededGenerator::acquire::<Host>(&device, 21);
        let unit = Distribution::Normal(0.0, 1.0);
        let cases = [
            // (batch, height, channels, out, kernel, stride, padding, residual, relu)
            (3, 28, 1, 16, 7, 2, 3, false, true),
            (40, 7, 16, 16, 3, 1, 1, true, true),
            (5, 7, 8, 12, 3, 2, 1, false, true),
            (5, 4, 8, 12, 1, 2, 0, false, false),
            (4, 1, 8, 8, 3, 1, 1, true, false),
            (4, 3, 8, 5, 1, 1, 0, false, false),
        ];
        for (batch, side, channels, out, kernel, stride, padding, residual, rectify) in cases {
            let patches = PatchRows::new(side, side, kernel, stride, padding);
            let x = Tensor::<Host, 3>::random([batch, side * side, channels], unit, &device);
            let conv = ConvAffine {
                weight: Tensor::random([patches.taps.len() * channels, out], unit, &device),
                scale: Tensor::random([out], unit, &device),
                shift: Tensor::random([out], unit, &device),
            };
            let residual =
                residual.then(|| Tensor::random([batch, patches.cells(), out], unit, &device));
            let host = conv_patches(x.clone(), &patches, &conv, residual.clone(), rectify);
            let want = composed_conv(x, &patches, &conv, residual, rectify);
            assert_eq!(host.dims(), want.dims());
            host.into_data()
                .assert_approx_eq::<f32>(&want.into_data(), Default::default());
        }
    }
}
