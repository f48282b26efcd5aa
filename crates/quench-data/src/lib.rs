//! Data sets and the loader of Quench.
//!
//! - Readers that validate real formats: [`read_idx`] (MNIST-like IDX, raw or gzip), [`Mnist`]
//!   (found by a fixed lookup order), [`BitStrings`] (qRNG `<bits> <label>` lines); every
//!   failure is a [`DataError`] naming the file and the line or byte offset.
//! - [`summary`]: validate any of these files and describe it.
//! - Seeded generators: [`stand_in_digits`] (MNIST-shaped rings and strokes where no MNIST is
//!   installed), [`Synth`] (the SGLD workload's data), [`synthetic_qrng`] (biased,
//!   correlated, drifting bit sources), [`TwoModeMixture`] (Welling & Teh's sampler check).
//! - [`Loader`]: deterministic batches with a member axis, streamed through persistent worker
//!   threads and a staging thread, or gathered on the device.

mod dataset;
mod error;
mod idx;
mod loader;
mod mixture;
mod mnist;
mod qrng;
mod qrng_sources;
mod stand_in;
mod summary;
mod synth;
#[cfg(test)]
mod test_files;

pub use dataset::Dataset;
pub use error::DataError;
pub use idx::{IdxArray, read_idx};
pub use loader::{Batch, Epoch, Loader, LoaderConfig, Mode};
pub use mixture::{TwoModeMixture, WELLING_TEH_POINTS};
pub use mnist::{
    DEBIAN_FASHION_MNIST_DIR, MNIST_ENV, MNIST_MEAN, MNIST_STD, Mnist, MnistSource,
    PROJECT_MNIST_DIR, Split,
};
pub use qrng::{BitStrings, QRNG_LABELS};
pub use qrng_sources::{SourceModel, synthetic_qrng};
pub use stand_in::{STAND_IN_SIDE, STAND_IN_TEST, STAND_IN_TRAIN, stand_in_digits};
pub use summary::{ClassSummary, Format, Summary, summary};
pub use synth::{SYNTH_DIM, SYNTH_TEST, SYNTH_TRAIN, Synth, SynthLabels};
