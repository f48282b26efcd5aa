//! Parameter lists with a member axis: gradients, per-member norms, clipping and masks.

use burn::tensor::{Bool, Tensor};
use quench_device::Precision;
use quench_kernels::ops::mlp::member_sums;
pub use quench_kernels::ops::mlp::{clip_member_norms, member_norms};
use quench_kernels::readback::to_host_f32;
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use quench_kernels::{QuenchBackend, QuenchOps};
use quench_support::stats::{self, max_or_nan};

/// Marks every parameter as requiring gradients (a fresh leaf of the autodiff graph).
pub fn require_grad<B: QuenchBackend>(
    params: Vec<Tensor<B::InnerBackend, 3>>,
) -> Vec<Tensor<B, 3>> {
    params
        .into_iter()
        .map(|p| Tensor::from_inner(p).require_grad())
        .collect()
}

/// The gradients of `params` in `grads`, zero where a parameter took no part in the loss.
pub fn gradients<B: QuenchBackend>(
    params: &[Tensor<B, 3>],
    grads: &B::Gradients,
) -> Vec<Tensor<B::InnerBackend, 3>> {
    params
        .iter()
        .map(|p| {
            p.grad(grads)
                .unwrap_or_else(|| p.clone().inner().zeros_like())
        })
        .collect()
}

/// The values of `params` without their autodiff history.
pub fn values<B: QuenchBackend>(params: &[Tensor<B, 3>]) -> Vec<Tensor<B::InnerBackend, 3>> {
    params.iter().map(|p| p.clone().inner()).collect()
}

/// `[members, 1, 1]`: true where every gradient entry of the member is finite.
pub fn finite_members<B: QuenchOps>(grads: &[Tensor<B, 3>]) -> Tensor<B, 3, Bool> {
    grads
        .iter()
        .map(|g| member_sums(g.clone()))
        .reduce(|a, b| a + b)
        .map(|s| s.is_finite())
        .unwrap_or_else(|| unreachable!("a parameter list is never empty"))
}

/// The members that take this optimiser step, `[members, 1, 1]` (`None`: all): the `active`
/// ones, and under a low `precision`, where the forward pass can overflow, only those whose
/// whole gradient is finite.
pub fn stepping_members<B: QuenchOps>(
    active: Option<Tensor<B, 3, Bool>>,
    grads: &[Tensor<B, 3>],
    precision: Precision,
) -> Option<Tensor<B, 3, Bool>> {
    if precision == Precision::F32 {
        return active;
    }
    let finite = finite_members(grads);
    Some(match active {
        Some(a) => a.bool_and(finite),
        None => finite,
    })
}

/// `kept` with every member where `replace` (`[members, 1, 1]`) is true taken from
/// `candidates` instead: how each member's best weights follow its improvements.
pub fn replace_members<B: QuenchOps>(
    kept: Vec<Tensor<B, 3>>,
    candidates: &[Tensor<B, 3>],
    replace: Tensor<B, 3, Bool>,
) -> Vec<Tensor<B, 3>> {
    kept.into_iter()
        .zip(candidates)
        .map(|(k, c)| k.mask_where(replace.clone().expand(c.dims()), c.clone()))
        .collect()
}

/// Averages gradients over the member axis, leaving out members where `keep` is false:
/// `[members, a, b]` to `[1, a, b]`. With no member kept the result is zero.
pub fn masked_member_mean<B: QuenchOps>(
    grads: Vec<Tensor<B, 3>>,
    keep: Tensor<B, 3, Bool>,
) -> Vec<Tensor<B, 3>> {
    let count = keep
        .clone()
        .float()
        .sum_all()
        .clamp_min(1.0)
        .reshape_to([1, 1, 1]);
    masked_member_sum(grads, keep)
        .into_iter()
        .map(|g| g / count.clone())
        .collect()
}

/// Sums gradients over the member axis, leaving out members where `keep` is false:
/// `[members, a, b]` to `[1, a, b]`; what each process contributes to a mean over processes.
pub fn masked_member_sum<B: QuenchOps>(
    grads: Vec<Tensor<B, 3>>,
    keep: Tensor<B, 3, Bool>,
) -> Vec<Tensor<B, 3>> {
    grads
        .into_iter()
        .map(|g| {
            let dims = g.dims();
            g.mask_fill(keep.clone().bool_not().expand(dims), 0.0)
                .sum_along(0)
        })
        .collect()
}

/// The largest `|a - b|` over the entries of two parameter lists of the same shapes, read
/// back once per tensor: NaN when any entry is, infinite when the lists do not pair up.
pub fn max_abs_difference<B: QuenchOps>(a: &[Tensor<B, 3>], b: &[Tensor<B, 3>]) -> f64 {
    if a.len() != b.len() || a.iter().zip(b).any(|(x, y)| x.dims() != y.dims()) {
        return f64::INFINITY;
    }
    max_or_nan(
        a.iter().zip(b).map(|(x, y)| {
            stats::max_abs_difference(&to_host_f32(x.clone()), &to_host_f32(y.clone()))
        }),
    )
}

/// The largest `|a - b|` of each tensor of `a` and `b` relative to that tensor's largest
/// `|a|`, the worst over the list: how far two computations of the same gradients part,
/// whatever their scale. Infinite when the lists do not pair up or a tensor of `a` is all zero
/// while its partner is not; NaN when any entry is.
pub fn max_relative_difference<B: QuenchOps>(a: &[Tensor<B, 3>], b: &[Tensor<B, 3>]) -> f64 {
    if a.len() != b.len() || a.iter().zip(b).any(|(x, y)| x.dims() != y.dims()) {
        return f64::INFINITY;
    }
    max_or_nan(a.iter().zip(b).map(|(x, y)| {
        let (x, y) = (to_host_f32(x.clone()), to_host_f32(y.clone()));
        let difference = stats::max_abs_difference(&x, &y);
        let scale = max_or_nan(x.iter().map(|v| f64::from(v.abs())));
        if difference == 0.0 {
            0.0
        } else {
            difference / scale
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type Cpu = NdArray<f32>;

    fn t(values: &[f32], dims: [usize; 3]) -> Tensor<Cpu, 3> {
        Tensor::from_data(
            burn::tensor::TensorData::new(values.to_vec(), dims),
            &Default::default(),
        )
    }

    #[test]
    fn norms_and_clipping_are_per_member() {
        let w = t(&[3.0, 0.0, 0.1, 0.0], [2, 1, 2]);
        let b = t(&[4.0, 0.0], [2, 1, 1]);
        let norms = member_norms(&[w.clone(), b.clone()])
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        assert!((norms[0] - 5.0).abs() < 1e-6 && (norms[1] - 0.1).abs() < 1e-6);
        let clipped = clip_member_norms(vec![w, b], 1.0);
        let after = member_norms(&clipped).into_data().to_vec::<f32>().unwrap();
        assert!((after[0] - 1.0).abs() < 1e-5, "{after:?}");
        assert!(
            (after[1] - 0.1).abs() < 1e-6,
            "small gradients are untouched: {after:?}"
        );
    }

    #[test]
    fn non_finite_members_are_left_out_of_the_mean() {
        let g = t(&[1.0, 2.0, f32::NAN, 0.0, 3.0, 4.0], [3, 1, 2]);
        let keep = finite_members(std::slice::from_ref(&g));
        assert_eq!(
            keep.clone().into_data().to_vec::<bool>().unwrap(),
            vec![true, false, true]
        );
        let mean = masked_member_mean(vec![g], keep).remove(0);
        assert_eq!(mean.dims(), [1, 1, 2]);
        assert_eq!(mean.into_data().to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
    }

    #[test]
    fn gradients_flow_to_leaves() {
        type Ad = burn::backend::Autodiff<Cpu>;
        let p = require_grad::<Ad>(vec![t(&[1.0, 2.0], [1, 1, 2]), t(&[5.0], [1, 1, 1])]);
        let loss = (p[0].clone() * p[0].clone()).sum_all();
        let grads = loss.backward();
        let g = gradients(&p, &grads);
        assert_eq!(
            g[0].clone().into_data().to_vec::<f32>().unwrap(),
            vec![2.0, 4.0]
        );
        assert_eq!(g[1].clone().into_data().to_vec::<f32>().unwrap(), vec![0.0]);
    }

    #[test]
    fn relative_differences_are_per_tensor_and_scale_free() {
        let big = t(&[100.0, -50.0], [1, 1, 2]);
        let small = t(&[1e-6, 2e-6], [1, 2, 1]);
        let a = [big.clone(), small.clone()];
        assert_eq!(max_relative_difference(&a, &a), 0.0);
        let b = [big, t(&[1e-6, 1e-6], [1, 2, 1])];
        let d = max_relative_difference(&a, &b);
        assert!((d - 0.5).abs() < 1e-6, "{d}");
        let zero = [t(&[0.0, 0.0], [1, 1, 2])];
        let one = [t(&[0.0, 1.0], [1, 1, 2])];
        assert_eq!(max_relative_difference(&zero, &one), f64::INFINITY);
        assert_eq!(max_relative_difference(&zero, &zero), 0.0);
        assert_eq!(max_relative_difference(&zero, &one[..0]), f64::INFINITY);
    }
}
