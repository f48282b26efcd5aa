//! Host kernel of the inference convolution ([`crate::ops::conv`]) on the CPU backend in f32.
//!
//! Images are split over lanes; each lane takes its images a few at a time, gathers their
//! patch rows into one buffer (one copy of `channels` values per window tap, zeros for
//! padding), multiplies it by the weight through [`quench_host::gemm`], and applies the folded
//! BatchNorm, residual and ReLU in one pass over the product while it is in cache. A 1x1
//! convolution with stride 1 multiplies the input in place.

use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use crate::ops::conv::PatchRows;
use quench_host::gemm::{MatRef, gemm};
use quench_host::lanes::in_lanes;
use quench_host::lanes::lanes_for;
use quench_host::math::relu_if;
use quench_host::tensor::{Host, in_f32, tensor, values};

/// Patch-matrix values gathered per product: about 1 MiB, so that the buffer and the
/// product's output stay in the core's L2 cache.
const PATCH_VALUES: usize = 1 << 18;

/// The folded BatchNorm, residual and ReLU of a convolution's output rows.
#[derive(Clone, Copy)]
struct Epilogue<'a> {
    scale: &'a [f32],
    shift: &'a [f32],
    rectify: bool,
}

quench_host::simd_dispatch! {
    /// `out = act(out * scale + shift [+ residual])` over rows of `scale.len()` channels.
    fn finish(out: &mut [f32], residual: Option<&[f32]>, epilogue: Epilogue<'_>) => finish_portable
}

#[inline(always)]
fn finish_portable(out: &mut [f32], residual: Option<&[f32]>, epilogue: Epilogue<'_>) {
    let width = epilogue.scale.len();
    let rectify = epilogue.rectify;
    for (r, row) in out.chunks_exact_mut(width).enumerate() {
        let row_affine = row
            .iter_mut()
            .zip(epilogue.scale.iter().zip(epilogue.shift));
        match residual {
            Some(res) => {
                let res = &res[r * width..(r + 1) * width];
                for ((v, (&s, &b)), &e) in row_affine.zip(res) {
                    *v = relu_if(*v * s + b + e, rectify);
                }
            }
            None => {
                for (v, (&s, &b)) in row_affine {
                    *v = relu_if(*v * s + b, rectify);
                }
            }
        }
    }
}

/// `act(patches(x) W * scale + shift [+ residual])`: `x` `[batch, positions, channels]`,
/// `weight` `[taps * channels, out]`, `scale` and `shift` `[out]`, `residual` `[batch,
/// cells, out]`; the result `[batch, cells, out]`.
pub(crate) fn conv_patches(
    x: FloatTensor<Host>,
    patches: &PatchRows,
    [weight, scale, shift]: [FloatTensor<Host>; 3],
    residual: Option<FloatTensor<Host>>,
    rectify: bool,
) -> FloatTensor<Host> {
    let [x, weight, scale, shift] = [x, weight, scale, shift].map(in_f32);
    let residual = residual.map(in_f32);
    let xs = x.shape();
    let (batch, positions, channels) = (xs[0], xs[1], xs[2]);
    let out_channels = weight.shape()[1];
    let (cells, taps) = (patches.cells(), patches.taps.len());
    let inner = taps * channels;
    assert_eq!(positions, patches.positions, "input grid vs patch geometry");
    assert_eq!(weight.shape()[0], inner, "weight rows vs taps x channels");
    let per_channel = [scale.shape().num_elements(), shift.shape().num_elements()];
    assert_eq!(
        per_channel, [out_channels; 2],
        "scale and shift vs output channels"
    );
    if let Some(r) = &residual {
        let want = batch * patches.cells() * out_channels;
        assert_eq!(r.shape().num_elements(), want, "residual vs output");
    }
    let (xv, wv, sv, bv) = (values(&x), values(&weight), values(&scale), values(&shift));
    let rv = residual.as_ref().map(values);
    let mut out = vec![0.0; batch * cells * out_channels];
    if out.is_empty() {
        return tensor(out, [batch, cells, out_channels]);
    }
    let identity = patches.is_identity();
    let epilogue = Epilogue {
        scale: &sv,
        shift: &bv,
        rectify,
    };
    let image_out = cells * out_channels;
    let lanes = lanes_for(batch * cells * inner * out_channels).min(batch);
    // Jobs: (first image, that range's images of the output).
    let per_lane = batch.div_ceil(lanes);
    let jobs: Vec<(usize, &mut [f32])> = out
        .chunks_mut(per_lane * image_out)
        .enumerate()
        .map(|(j, part)| (j * per_lane, part))
        .collect();
    let chunk = (PATCH_VALUES / (cells * inner).max(1)).max(1);
    in_lanes(jobs, lanes, |group| {
        let mut buffer = Vec::new();
        for (first, part) in group {
            for (c, out_images) in part.chunks_mut(chunk * image_out).enumerate() {
                let start = first + c * chunk;
                let images = out_images.len() / image_out;
                let rows = images * cells;
                let x_images = &xv[start * positions * channels..][..images * positions * channels];
                let lhs = if identity || inner == 0 {
                    // No taps (nothing to gather): the product is zero, kept as it is.
                    x_images
                } else {
                    buffer.resize(rows * inner, 0.0);
                    gather_into(&mut buffer, x_images, patches, channels);
                    &buffer[..]
                };
                if inner > 0 {
                    gemm(
                        out_images,
                        MatRef::row_major(lhs, rows, inner),
                        MatRef::row_major(&wv, inner, out_channels),
                        false,
                    );
                }
                let residual = rv
                    .as_deref()
                    .map(|r| &r[start * image_out..][..images * image_out]);
                finish(out_images, residual, epilogue);
            }
        }
    });
    tensor(out, [batch, cells, out_channels])
}

/// The patch matrix of `x` (whole images of `[positions, channels]`) into `buffer`, `[images
/// * cells, taps * channels]`.
fn gather_into(buffer: &mut [f32], x: &[f32], patches: &PatchRows, channels: usize) {
    let positions = patches.positions;
    let image = positions * channels;
    let row_width = patches.taps.len() * channels;
    for (i, rows) in buffer
        .chunks_exact_mut(patches.cells() * row_width)
        .enumerate()
    {
        let x = &x[i * image..(i + 1) * image];
        for (dst, &p) in rows.chunks_exact_mut(channels).zip(&patches.rows) {
            if p == positions {
                dst.fill(0.0);
            } else {
                dst.copy_from_slice(&x[p * channels..(p + 1) * channels]);
            }
        }
    }
}
