//! Data sets and the loader of Quench.
//!
//! - Readers that validate real formats: [`read_idx`] (MNIST-like IDX, raw or gzip), [`Mnist`]
//!   (found by a fixed lookup order), [`BitStrings`] (qRNG `<bits> <label>` lines); every
//!   failure is a [`DataError`] naming the file and the line or byte offset.
//! - [`Bars::read`]: MetaTrader-5 style OHLCV exports (CSV or tab-separated, with or without
//!   header), every bar checked, gaps in time reported.
//! - [`summary`]: validate any of these files and describe it.
//! - Seeded generators: [`stand_in_digits`] (MNIST-shaped rings and strokes where no MNIST is
//!   installed), [`Synth`] (the SGLD workload's data), [`synthetic_qrng`] (biased,
//!   correlated, drifting bit sources), [`TwoModeMixture`] (Welling & Teh's sampler check),
//!   [`synthetic_market`] (regime-switching FX bars with volatility clustering).
//! - Direction classifiers on bars (guide 004): [`bar_features`] computes 29 causal
//!   [`FEATURES`] per bar; [`market_windows`] cuts them into labelled windows (down, flat, up),
//!   split chronologically with purging and normalised on the training part.
//! - [`Loader`]: deterministic batches with a member axis, streamed through persistent worker
//!   threads and a staging thread, or gathered on the device.

mod civil;
mod dataset;
mod error;
mod idx;
mod loader;
mod loads;
mod market;
mod market_features;
mod market_windows;
mod mixture;
mod mnist;
mod ohlcv;
mod qrng;
mod qrng_sources;
mod stand_in;
mod summary;
mod synth;
// The loader and the readers end to end through the public items, in the unit-test binary so the generic code is compiled once for both.
#[cfg(test)]
mod end_to_end;
#[cfg(test)]
mod test_files;

pub use dataset::Dataset;
pub use error::DataError;
pub use idx::{IdxArray, read_idx};
pub use loader::{Batch, Epoch, Loader, LoaderConfig, MAX_WORKERS, Mode};
pub use loads::LOAD_TARGET;
pub use market::{MARKET_START, MarketConfig, synthetic_market};
pub use market_features::{FEATURES, FeatureTable, bar_features};
pub use market_windows::{DOWN, FLAT, MarketData, MarketPart, UP, WindowConfig, market_windows};
pub use mixture::{TwoModeMixture, WELLING_TEH_POINTS};
pub use mnist::{
    DEBIAN_FASHION_MNIST_DIR, MNIST_ENV, MNIST_MEAN, MNIST_PIXELS, MNIST_SIDE, MNIST_STD, Mnist,
    MnistSource, PROJECT_MNIST_DIR, Split, check_mnist_images,
};
pub use ohlcv::{Bars, Gap, OhlcvFile};
pub use qrng::{BitStrings, QRNG_LABELS};
pub use qrng_sources::{SourceModel, synthetic_qrng};
pub use stand_in::{STAND_IN_SIDE, STAND_IN_TEST, STAND_IN_TRAIN, stand_in_digits};
pub use summary::{ClassSummary, Format, Summary, summary};
pub use synth::{SYNTH_DIM, SYNTH_TEST, SYNTH_TRAIN, Synth, SynthLabels};

#[cfg(test)]
quench_support::aligned_allocator!();
