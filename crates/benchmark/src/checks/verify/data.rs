//! quench-data: the loader's batches the same on the caller's thread, with workers and resident.

use super::Check;
use quench_data::{Dataset, Loader, LoaderConfig, Mode};
use quench_kernels::QuenchBackend;
use quench_kernels::readback::to_host_f32;
use quench_kernels::views::ReshapeTo;
use quench_qrng::synthetic_recording;
use quench_support::stats::max_or_nan;
use std::sync::Arc;

/// One epoch's batches from the loader on the caller's thread, with two workers and a staging
/// thread, and resident on the device: the same features and labels in the same order.
pub(super) fn loader_determinism<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Check> {
    let data: Arc<Dataset> = Arc::new(synthetic_recording(100, 7)?.to_dataset());
    let epoch = |mode| -> anyhow::Result<Vec<f32>> {
        let config = LoaderConfig {
            batch_size: 32,
            shuffle: true,
            drop_last: false,
            mode,
        };
        let mut loader = Loader::<B::InnerBackend>::new(vec![data.clone()], &[3], &config, device)?;
        Ok(loader
            .epoch(1)
            .flat_map(|batch| {
                let mut values = to_host_f32(batch.features);
                values.extend(to_host_f32(batch.labels.float().unsqueeze_to::<3>(2)));
                values
            })
            .collect())
    };
    let reference = epoch(Mode::ON_CALLER)?;
    let mut errors = Vec::new();
    for mode in [
        Mode::Streaming {
            num_workers: 2,
            prefetch: 2,
            staging: true,
        },
        Mode::Resident,
    ] {
        let other = epoch(mode)?;
        errors.push(if other.len() == reference.len() {
            max_or_nan(
                reference
                    .iter()
                    .zip(&other)
                    .map(|(a, b)| f64::from((a - b).abs())),
            )
        } else {
            f64::INFINITY
        });
    }
    let error = max_or_nan(errors);
    Ok(Check::measured(
        "loader: same batches with workers, staging, resident",
        error,
        0.0,
    ))
}
