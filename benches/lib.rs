//! Criterion benchmarks of Quench; the benches live beside this file. What more than one
//! bench builds lives here.

use quench_data::{
    Dataset, MarketConfig, MarketData, WindowConfig, market_windows, synthetic_market,
};
use quench_device::Precision;
use quench_hybrid::training::{Execution, FeatureMode};
use quench_hybrid::{CircuitMode, HybridData};

/// Bars per symbol of the whole-run benches' synthetic market: about 2,000 training windows of
/// two symbols (eight batches of 256, the batch both temporal models train at).
pub const EPOCH_BARS: usize = 1_500;

/// The whole-run benches' market: two symbols of [`EPOCH_BARS`] synthetic bars, windowed as
/// guide 004 windows them.
pub fn epoch_market() -> MarketData {
    let market = MarketConfig {
        symbols: 2,
        bars: EPOCH_BARS,
        seed: 7,
        ..MarketConfig::default()
    };
    synthetic_market(&market)
        .and_then(|bars| market_windows(&bars, &WindowConfig::default()))
        .unwrap_or_else(|err| panic!("the bench's market: {err}"))
}

/// Training images of the hybrid's whole-run benches (256 each for validation and test).
pub const EPOCH_TRAIN_IMAGES: usize = 1_024;

/// The hybrid's whole-run benches' data: [`EPOCH_TRAIN_IMAGES`] training images, 256
/// validation and 256 test images of 28 x 28 values in [-1, 1), labels 0 to 9.
pub fn epoch_images() -> HybridData {
    HybridData {
        train: images(EPOCH_TRAIN_IMAGES, 1),
        validation: images(256, 2),
        test: images(256, 3),
    }
}

/// The hybrid's `all` variant's way: the fused circuit, features computed once, f32.
pub const HYBRID_ALL: Execution = Execution {
    circuit: CircuitMode::Fused,
    features: FeatureMode::Precomputed,
    precision: Precision::F32,
};

/// `count` images, different per `salt`.
fn images(count: usize, salt: u32) -> Dataset {
    let pixels = quench_kernels::testing::spread(count * 784, salt, 1.0);
    let labels = (0..count as i64)
        .map(|i| (i * 7 + i64::from(salt)) % 10)
        .collect();
    Dataset::new(pixels, labels, vec![784])
        .unwrap_or_else(|err| panic!("the bench's images: {err}"))
}
