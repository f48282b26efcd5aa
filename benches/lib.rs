//! Criterion benchmarks of Quench; the benches live beside this file. What more than one
//! bench builds lives here.

use quench_data::{
    Dataset, MarketConfig, MarketData, WindowConfig, market_windows, synthetic_market,
};

/// Bars per symbol of the whole-run benches' synthetic market: about 2,000 training windows of
/// two symbols (eight LSTM batches of 256, four Transformer batches of 512).
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

/// Images in the hybrid's whole-run benches' training, validation and test parts.
pub const EPOCH_IMAGES: [usize; 3] = [1_024, 256, 256];

/// `count` images of 28 x 28 values in [-1, 1) and labels 0 to 9, different per `salt`.
pub fn images(count: usize, salt: u32) -> Dataset {
    let pixels = quench_kernels::testing::spread(count * 784, salt, 1.0);
    let labels = (0..count as i64)
        .map(|i| (i * 7 + i64::from(salt)) % 10)
        .collect();
    Dataset::new(pixels, labels, vec![784])
        .unwrap_or_else(|err| panic!("the bench's images: {err}"))
}
