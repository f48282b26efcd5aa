//! The seam's operations and the tensor helpers on the tests' device (lavapipe in CI's
//! wgpu job, `QUENCH_TEST_DEVICE`), against the CPU: each operation's device kernel or
//! composition gives the host kernel's values and gradients, and the reductions count every
//! element of long axes (Burn 0.21's CubeCL reductions do not), and a second process finds
//! the first one's autotune results in the default cache folder. Here, above quench-kernels,
//! because they check what the device runs, as everything in this crate does.

/// The layer operations on the tests' device (the default compositions on wgpu and CUDA, under
/// the autodiff backend's nodes) against the CPU backend's host kernels: values and gradients.
mod operations {
    use burn::backend::{Autodiff, NdArray};
    use quench_kernels::ops::attention::{AttentionInputs, attention};
    use quench_kernels::ops::batch_norm::batch_norm;
    use quench_kernels::ops::dense::{Activation, dense, layer_norm};
    use quench_kernels::ops::lstm::{LstmWeights, lstm};
    use quench_kernels::readback::{float_tensor, to_host_f32};
    use quench_kernels::reductions::Reduce;
    use quench_kernels::views::ReshapeTo;
    use quench_kernels::{QuenchBackend, QuenchOps};

    /// Deterministic values in [-1, 1).
    fn values(len: usize, salt: u32) -> Vec<f32> {
        quench_kernels::testing::spread(len, salt, 1.0)
    }

    /// Every layer operation in one loss on backend `X`: the output values of each and the
    /// gradient of every input, all read back to the host.
    fn layers<X: QuenchBackend>(device: &X::Device) -> Vec<Vec<f32>> {
        let input = |shape: [usize; 3], salt: u32| {
            float_tensor::<X, f32, 3>(values(shape.iter().product(), salt), shape, device)
                .require_grad()
        };
        let (members, batch, seq, features, hidden, heads) = (2, 3, 5, 4, 3, 2);
        let x = input([members, batch * seq, features], 1);
        let rows = 2 * members;
        let w_x = input([rows, features, 4 * hidden], 2);
        let w_h = input([rows, hidden, 4 * hidden], 3);
        let bias = input([rows, 1, 4 * hidden], 4);
        let weights = LstmWeights {
            w_x: w_x.clone(),
            w_h: w_h.clone(),
            bias: bias.clone(),
        };
        let h = lstm(
            x.clone().reshape_to([members, batch, seq, features]),
            &weights,
            2,
        )
        .reshape_to([members, batch * seq, 2 * hidden]);
        let gamma = input([members, 1, 2 * hidden], 5);
        let beta = input([members, 1, 2 * hidden], 6);
        let normed = layer_norm(h.clone(), &gamma, &beta, 1e-5);
        let w = input([members, 2 * hidden, 2 * hidden], 7);
        let b = input([members, 1, 2 * hidden], 8);
        let activated = dense(normed.clone(), &w, &b, Some(Activation::Gelu));
        let qkv = activated
            .clone()
            .reshape_to([members * batch, seq, 2 * hidden]);
        let context = attention(&AttentionInputs {
            q: qkv.clone(),
            k: qkv.clone().mul_scalar(0.5),
            v: qkv,
            mask: None,
            heads,
        });
        let loss_weights = float_tensor::<X, f32, 3>(
            values(members * batch * seq * 2 * hidden, 9),
            [members * batch, seq, 2 * hidden],
            device,
        );
        // Batch normalisation (with ReLU) of the LSTM's output, its own term in the loss.
        let batch_normed = batch_norm(h.clone(), &gamma, &beta, 1e-5, true).output;
        let bn_weights = float_tensor::<X, f32, 3>(
            values(members * batch * seq * 2 * hidden, 10),
            [members, batch * seq, 2 * hidden],
            device,
        );
        // Attention pooling of the normalised states, weighted by a softmax of the dense
        // layer's sums over time.
        let scores = activated
            .clone()
            .reshape_to([members * batch, seq, 2 * hidden])
            .sum_along(2)
            .reshape_to([members * batch, seq]);
        let pooled = quench_kernels::ops::pooling::weighted_sum(
            normed
                .clone()
                .reshape_to([members * batch, seq, 2 * hidden]),
            burn::tensor::activation::softmax(scores, 1),
        );
        let pool_weights = float_tensor::<X, f32, 2>(
            values(members * batch * 2 * hidden, 11),
            [members * batch, 2 * hidden],
            device,
        );
        // Attention with dropped-out scores (kept ones scaled by 2), from other projections.
        let groups = members * batch;
        let kept: Vec<f32> = values(groups * heads * seq * seq, 12)
            .into_iter()
            .map(|v| if v > 0.0 { 2.0 } else { 0.0 })
            .collect();
        let mask = float_tensor::<X, f32, 4>(kept, [groups, heads, seq, seq], device);
        let qkv = activated.clone().reshape_to([groups, seq, 2 * hidden]);
        let masked = attention(&AttentionInputs {
            q: qkv.clone().mul_scalar(-0.7),
            k: qkv.clone(),
            v: qkv.mul_scalar(1.3),
            mask: Some(mask),
            heads,
        });
        let masked_weights = float_tensor::<X, f32, 3>(
            values(groups * seq * 2 * hidden, 13),
            [groups, seq, 2 * hidden],
            device,
        );
        let loss = (context.clone() * loss_weights).sum_all()
            + (batch_normed.clone() * bn_weights).sum_all()
            + (pooled.clone() * pool_weights).sum_all()
            + (masked.clone() * masked_weights).sum_all();
        let grads = loss.backward();
        let mut out: Vec<Vec<f32>> = [h, normed, activated]
            .into_iter()
            .map(to_host_f32)
            .collect();
        out.push(to_host_f32(context));
        out.push(to_host_f32(batch_normed));
        out.push(to_host_f32(pooled));
        out.push(to_host_f32(masked));
        for p in [&x, &w_x, &w_h, &bias, &gamma, &beta, &w, &b] {
            out.push(p.grad(&grads).map(to_host_f32).unwrap_or_default());
        }
        out
    }

    /// The inference convolution (stem-like, and 3x3 with stride, residual and ReLU) and two
    /// Adam steps (AdamW, one member masked out of the second) on backend `X`, read back.
    fn inference_and_optimiser<X: QuenchOps>(device: &X::Device) -> Vec<Vec<f32>> {
        use quench_kernels::ops::adam::{AdamConfig, AdamStep, adam_step};
        use quench_kernels::ops::conv::{ConvAffine, PatchRows, conv_patches};
        let tensor = |shape: [usize; 3], salt: u32| {
            float_tensor::<X, f32, 3>(values(shape.iter().product(), salt), shape, device)
        };
        let row = |len: usize, salt: u32| {
            float_tensor::<X, f32, 1>(values(len, salt), [len], device).add_scalar(1.5)
        };
        let mut out = Vec::new();
        for (side, channels, kernel, stride, padding, residual) in
            [(12, 1, 7, 2, 3, false), (6, 5, 3, 2, 1, true)]
        {
            let patches = PatchRows::new(side, side, kernel, stride, padding);
            let (batch, width) = (3, 4);
            let conv = ConvAffine {
                weight: tensor([1, patches.taps.len() * channels, width], 11)
                    .reshape_to([patches.taps.len() * channels, width]),
                scale: row(width, 12),
                shift: row(width, 13),
            };
            let x = tensor([batch, side * side, channels], 14);
            let residual = residual.then(|| tensor([batch, patches.cells(), width], 15));
            out.push(to_host_f32(conv_patches(
                x, &patches, &conv, residual, true,
            )));
        }
        let config = AdamConfig {
            weight_decay: 0.01,
            decoupled: true,
            ..AdamConfig::default()
        };
        // Two parameters of different sizes: a CubeCL backend updates the list in one launch.
        let shapes = [[2, 3, 5], [2, 1, 5]];
        let mut params: Vec<_> = shapes.iter().map(|&d| tensor(d, 16)).collect();
        let mut moments: Vec<_> = shapes
            .iter()
            .map(|&d| [tensor(d, 17), tensor(d, 18).abs()])
            .collect();
        let lr = float_tensor::<X, f32, 3>(vec![0.01, 0.1], [2, 1, 1], device);
        for (t, only_first) in [(1u32, false), (2, true)] {
            let steps = float_tensor::<X, f32, 3>(vec![t as f32; 2], [2, 1, 1], device);
            let active = only_first.then(|| {
                float_tensor::<X, f32, 3>(vec![1.0, 0.0], [2, 1, 1], device).greater_elem(0.5)
            });
            let step = AdamStep::new(config, steps, lr.clone(), active);
            let grads = shapes.iter().map(|&d| tensor(d, 19 + t)).collect();
            (params, moments) = adam_step(config, params, grads, moments, &step);
        }
        for (p, [m, v]) in params.into_iter().zip(moments) {
            out.extend([p, m, v].map(to_host_f32));
        }
        // Two SGLD steps of three chains, the middle one finished.
        let keys: Vec<_> = (7..10)
            .map(quench_kernels::threefry::StreamKey::from_seed)
            .collect();
        let column = |values: Vec<f32>| float_tensor::<X, f32, 3>(values, [3, 1, 1], device);
        let mut params = [[3, 4, 6], [3, 1, 6], [3, 6, 1], [3, 1, 1]]
            .into_iter()
            .zip(20..)
            .map(|(shape, salt)| tensor(shape, salt))
            .collect::<Vec<_>>()
            .try_into()
            .expect("four parameters");
        for draw in 0..2 {
            let step = quench_kernels::ops::sgld::SgldStep {
                drift: column(vec![0.05, 0.0, 0.1]),
                noise: column(vec![0.02, 0.0, 0.01]),
                floor: 0.018,
                factor: 0.3,
                inv_var: 0.5,
                keys: &keys,
                draw,
            };
            let labels = tensor([3, 5, 1], 24).greater_elem(0.0).float();
            params = X::sgld_step(params, tensor([3, 5, 4], 25), labels, &step);
        }
        out.extend(params.map(to_host_f32));
        out
    }

    quench_kernels::device_test! {
        fn the_layer_operations_give_the_cpu_kernel_values_and_gradients<B>(device) {
            let on_device = layers::<B>(device);
            let on_host = layers::<Autodiff<NdArray<f32>>>(&Default::default());
            let names = [
                "lstm", "layer norm", "dense", "attention", "batch norm", "weighted sum",
                "masked attention", "dx",
                "dw_x", "dw_h", "dbias", "dgamma", "dbeta", "dw", "db",
            ];
            assert_eq!(on_device.len(), names.len());
            for ((name, got), want) in names.iter().zip(&on_device).zip(&on_host) {
                assert_eq!(got.len(), want.len(), "{name}: sizes");
                assert!(!want.is_empty(), "{name}: no gradient");
                let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
                let gap = quench_support::stats::max_abs_difference(got, want) as f32;
                assert!(gap / scale < 1e-4, "{name}: off by {:e} of its scale", gap / scale);
            }
        }

        fn the_inference_and_optimiser_operations_give_the_cpu_kernel_values<B>(device) {
            let on_device = inference_and_optimiser::<B::InnerBackend>(device);
            let on_host = inference_and_optimiser::<NdArray<f32>>(&Default::default());
            let names = [
                "stem conv", "strided conv", "adam weight", "adam weight m", "adam weight v",
                "adam bias", "adam bias m", "adam bias v", "sgld w1", "sgld b1", "sgld w2",
                "sgld b2",
            ];
            assert_eq!(on_device.len(), names.len());
            for ((name, got), want) in names.iter().zip(&on_device).zip(&on_host) {
                assert_eq!(got.len(), want.len(), "{name}: sizes");
                let scale = want.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
                let gap = quench_support::stats::max_abs_difference(got, want) as f32;
                assert!(gap / scale < 1e-4, "{name}: off by {:e} of its scale", gap / scale);
            }
        }
    }
}

mod reductions {
    use burn::tensor::{Int, Tensor};

    use quench_kernels::readback::to_host_f32;
    use quench_kernels::reductions::Reduce;
    use quench_kernels::views::ReshapeTo;

    quench_kernels::device_test! {
        /// Every element of long axes is counted, in every layout Burn's reductions got wrong:
        /// ones with a two at the last place sum to `n + 1`.
        fn long_axes_count_every_element<B>(device) {
            for n in [65_535usize, 98_307] {
                let index = Tensor::<B::InnerBackend, 1, Int>::arange(0..n as i64, device).float();
                let values = index.equal_elem((n - 1) as f32).float() + 1.0;
                let want = (n + 1) as f32;
                let row: Tensor<B::InnerBackend, 2> = values.clone().reshape_to([1, n]);
                let column: Tensor<B::InnerBackend, 2> = values.clone().reshape_to([n, 1]);
                let middle: Tensor<B::InnerBackend, 3> = values.clone().reshape_to([1, n, 1]);
                assert_eq!(to_host_f32(row.sum_along(1)), vec![want], "row of {n}");
                assert_eq!(to_host_f32(column.clone().sum_along(0)), vec![want], "column of {n}");
                assert_eq!(to_host_f32(middle.sum_along(1)), vec![want], "middle axis of {n}");
                assert_eq!(to_host_f32(values.clone().sum_all()), vec![want], "all {n}");
                let mean = to_host_f32(column.mean_along(0))[0];
                assert!((mean - want / n as f32).abs() < 1e-6, "mean of {n}: {mean}");
                let mean = to_host_f32(values.mean_all())[0];
                assert!((mean - want / n as f32).abs() < 1e-6, "mean of all {n}: {mean}");
            }
        }

        /// A short axis followed by axes of one (summed as flattened rows) gives Burn's
        /// values and shape, and its gradient.
        fn short_axes_before_axes_of_one_sum_as_rows<B>(device) {
            let x = Tensor::<B, 1, Int>::arange(0..30, device)
                .float()
                .reshape_to::<4>([3, 10, 1, 1])
                .require_grad();
            let sum = x.clone().sum_along(1);
            assert_eq!(sum.dims(), [3, 1, 1, 1]);
            assert_eq!(to_host_f32(sum.clone()), vec![45.0, 145.0, 245.0]);
            let weights = Tensor::<B, 4>::from_floats([[[[1.0]]], [[[2.0]]], [[[3.0]]]], device);
            let grads = (sum * weights).sum_all().backward();
            let grad = x.grad(&grads).expect("x takes part in the sum");
            let want: Vec<f32> = (0..30).map(|i| (i / 10 + 1) as f32).collect();
            assert_eq!(to_host_f32(grad), want);
        }

        /// A long axis between others keeps their layout, and the gradient reaches every
        /// element (the staged sum pads, reshapes and concatenates under autodiff).
        fn staged_sums_keep_the_other_axes_and_their_gradients<B>(device) {
            let n = 40_000;
            // Small integers, so that every sum is exact in f32.
            let values = Tensor::<B, 1, Int>::arange(0..2 * n as i64 * 3, device)
                .remainder_scalar(7)
                .float()
                .reshape_to([2, n, 3])
                .require_grad();
            let sums = values.clone().sum_along(1);
            assert_eq!(sums.dims(), [2, 1, 3]);
            let mut want = vec![0.0f32; 6];
            for i in 0..2 * n * 3 {
                want[(i / (3 * n)) * 3 + i % 3] += (i % 7) as f32;
            }
            assert_eq!(to_host_f32(sums.clone().inner()), want);
            let weights = Tensor::<B, 3>::from_floats([[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0]]], device);
            let grads = (sums * weights).sum_all().backward();
            let grad = to_host_f32(values.grad(&grads).expect("the values take part in the sum"));
            assert_eq!(grad.len(), 2 * n * 3);
            assert!(grad[..3 * n].chunks(3).all(|c| c == [1.0, 2.0, 3.0]));
            assert!(grad[3 * n..].chunks(3).all(|c| c == [4.0, 5.0, 6.0]));
        }
    }
}

/// CubeCL's autotune results kept across processes in the default cache folder.
mod kernel_cache {
    /// Set in the processes that [`a_second_process_autotunes_no_shape_again`] starts.
    const CHILD: &str = "QUENCH_AUTOTUNE_CHILD";

    /// A batched product, read back, so that CubeCL tunes its matmul (one shape: on lavapipe
    /// each takes tens of seconds to tune).
    struct Products;

    impl quench_kernels::OnDevice for Products {
        type Output = ();

        fn run<B: quench_kernels::QuenchBackend>(self, device: &B::Device) {
            use burn::tensor::Tensor;
            let (m, k, n) = (24, 33, 17);
            let a = Tensor::<B::InnerBackend, 3>::ones([2, m, k], device);
            let b = Tensor::<B::InnerBackend, 3>::ones([2, k, n], device);
            let product = quench_kernels::readback::to_host_f32(a.matmul(b));
            assert!(product.iter().all(|&x| x == k as f32), "{m}x{k}x{n}");
        }
    }

    /// The same product in two processes, one after the other, with the default cache folder
    /// under a temporary `XDG_CACHE_HOME` (and no `QUENCH_CACHE_DIR`, no `cubecl.toml`): the
    /// first tunes its shape and keeps the result, the second finds it and tunes nothing
    /// again. On the CPU nothing is tuned.
    #[test]
    fn a_second_process_autotunes_no_shape_again() {
        if std::env::var_os(CHILD).is_some() {
            quench_kernels::testing::run_test(Products);
            return;
        }
        if quench_kernels::testing::on_cpu() {
            return;
        }
        let home = tempfile::tempdir().unwrap_or_else(|err| panic!("temporary folder: {err}"));
        let test = std::env::current_exe().unwrap_or_else(|err| panic!("this test: {err}"));
        let run = || {
            let status = std::process::Command::new(&test)
                .args([
                    "agreement::kernel_cache::a_second_process_autotunes_no_shape_again",
                    "--exact",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .env("XDG_CACHE_HOME", home.path())
                .env_remove(quench_platform::kernel_cache::CACHE_DIR_ENV)
                .current_dir(home.path())
                .status()
                .unwrap_or_else(|err| panic!("starting {}: {err}", test.display()));
            assert!(status.success(), "the products failed: {status}");
            quench_platform::kernel_cache::entries(&home.path().join("quench").join("cubecl")).tuned
        };
        let first = run();
        assert!(first > 0, "the first process kept no tuned shape");
        assert_eq!(run(), first, "the second process tuned shapes again");
    }
}
