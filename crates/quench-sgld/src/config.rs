//! The grid of an SGLD experiment, read from `configs/sgld/*.toml`.

use std::path::{Path, PathBuf};

use quench_data::{SYNTH_DIM, SYNTH_TEST, SYNTH_TRAIN};
use quench_support::load_toml;
use quench_support::numbers::{POSITIVE_IN_F32, fits_f32, positive_in_f32, short};
use quench_train::settings::{Valid, Validate};
use serde::{Deserialize, Serialize};

use super::{LossScale, SgldError};

/// Classes of MNIST-binary (digits 0 and 1): `mnist.per_class` training images of each.
pub const MNIST_CLASSES: usize = 2;

/// Which data the chains learn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatasetKind {
    /// SYNTH: 4-d, linearly separable, one data set per repetition.
    #[default]
    Synth,
    /// MNIST digits 0 and 1 (Fashion-MNIST classes 0 and 1 where MNIST is absent), one
    /// training subset shared by all chains.
    Mnist,
}

/// The SYNTH data of each repetition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SynthConfig {
    /// Training points per repetition (the workload's 50).
    pub train: usize,
    /// Test points per repetition (the workload's 100).
    pub test: usize,
    /// Labels drawn as fair coin flips instead of by the teacher: the control where nothing
    /// can be learnt.
    pub random_labels: bool,
}

/// Pixels of an MNIST image, the inputs of an MNIST grid's networks.
const MNIST_PIXELS: usize = 28 * 28;

/// A lower bound of one batched SGLD step, seconds, for the work budget: a forward and a
/// backward pass of the one-hidden-layer network, the noise and the update, some 15 tensor
/// operations or one fused host kernel over every chain, each at least the cheapest operation
/// measured (about 60 ns, the 2-core VM's CPU backend).
pub const STEP_SECONDS: f64 = 1e-6;

impl Default for SynthConfig {
    fn default() -> Self {
        Self {
            train: SYNTH_TRAIN,
            test: SYNTH_TEST,
            random_labels: false,
        }
    }
}

/// The MNIST-binary data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MnistConfig {
    /// Directory of the IDX files; unset, `quench_data::MnistSource::locate` searches
    /// `$QUENCH_MNIST_DIR`, `data/mnist/`, then Debian's Fashion-MNIST.
    pub dir: Option<PathBuf>,
    /// Training images of each class, drawn without replacement with the grid's seed (the
    /// workload's 5,000).
    pub per_class: usize,
    /// Mean of the pixel normalisation `(p / 255 - mean) / std`.
    pub mean: f32,
    /// Standard deviation of the pixel normalisation.
    pub std: f32,
}

impl Default for MnistConfig {
    fn default() -> Self {
        Self {
            dir: None,
            per_class: 5_000,
            mean: quench_data::MNIST_MEAN,
            std: quench_data::MNIST_STD,
        }
    }
}

/// A grid of chains: every inverse temperature times every repetition. The defaults are the
/// workload's full SYNTH grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GridConfig {
    /// Which data set.
    pub dataset: DatasetKind,
    /// SYNTH settings (used when `dataset = "synth"`).
    pub synth: SynthConfig,
    /// MNIST settings (used when `dataset = "mnist"`).
    pub mnist: MnistConfig,
    /// Inverse temperatures, strictly ascending, finite in f32 and starting at 0: the bound
    /// integrates the training loss from beta = 0.
    pub betas: Vec<f64>,
    /// Epochs of the chains at each beta (same length as `betas`).
    pub epochs: Vec<usize>,
    /// Initial step size `a0` at each beta (same length as `betas`; positive and finite in
    /// f32); epoch `t` steps with `a0 (t + 1)^(-1/2)`.
    pub a0: Vec<f64>,
    /// Repetitions (chains) per beta; on SYNTH each has its own data set.
    pub repetitions: usize,
    /// Samples per minibatch (the original's 10 on SYNTH, 128 on MNIST); at most the training
    /// set's size.
    pub batch_size: usize,
    /// Hidden units of the 1-hidden-layer ReLU network.
    pub hidden: usize,
    /// Upper bound `l_max` of the bounded cross-entropy, nats: above ln 2 (the loss's floor
    /// `e^-l_max` below 1/2) and finite in f32.
    pub l_max: f64,
    /// The loss the chains' posterior is of: `"unit"` (default), the bounded loss mapped onto
    /// `[0, 1]` as in the PAC-Bayes bound; `"raw"`, the loss in nats as the original trained,
    /// which makes each beta act about `l_max` times its nominal value on the bound's loss.
    pub loss: LossScale,
    /// Standard deviation of the Gaussian prior on every parameter: positive, with it and the
    /// prior's precision `1 / prior_sigma^2` finite in f32.
    pub prior_sigma: f64,
    /// Confidence parameter of the bound: it holds with probability at least `1 - delta`.
    pub delta: f64,
    /// Seed of the data, initialisations, batch orders and noise.
    pub seed: u64,
}

impl Default for GridConfig {
    fn default() -> Self {
        Self {
            dataset: DatasetKind::Synth,
            synth: SynthConfig::default(),
            mnist: MnistConfig::default(),
            betas: vec![0.0, 1.0, 10.0, 30.0, 50.0, 70.0, 100.0, 200.0],
            epochs: vec![1, 100, 5_000, 10_000, 15_000, 20_000, 30_000, 30_000],
            a0: vec![1e-7, 1e-7, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
            repetitions: 30,
            batch_size: 10,
            hidden: 500,
            l_max: 4.0,
            loss: LossScale::Unit,
            prior_sigma: 1_000.0,
            delta: 0.05,
            seed: 0,
        }
    }
}

impl GridConfig {
    /// A small SYNTH grid whose chains run 1, 3 and 12 epochs, with a hot chain that moves a
    /// lot (beta 200 and a0 1.2 on the unit loss: the dynamics of beta 50 and a0 0.3 on nats), so that any mix-up between chains shows:
    /// the grid on which the execution paths are compared (the tests and `benchmark verify`).
    pub fn mixed_lengths() -> Self {
        Self {
            betas: vec![0.0, 1.0, 200.0],
            epochs: vec![1, 3, 12],
            a0: vec![0.01, 0.05, 1.2],
            repetitions: 2,
            hidden: 16,
            ..Self::default()
        }
    }

    /// Reads a grid from a TOML file and checks it; errors name the file.
    pub fn load(path: &Path) -> Result<Valid<Self>, SgldError> {
        let config: Self = load_toml(path)?;
        Valid::new(config).map_err(|refused| refused.with_origin(path.display().to_string()))
    }

    /// Checks every value; `origin` names where the grid came from in errors.
    pub fn check(&self, origin: &str) -> Result<(), SgldError> {
        let bad = |field: &'static str, value: String, reason: &str| {
            Err(SgldError::Invalid {
                origin: origin.to_string(),
                field,
                value,
                reason: reason.to_string(),
            })
        };
        if self.betas.first() != Some(&0.0) {
            return bad(
                "betas",
                format!("{:?}", self.betas),
                "must start at 0: the bound integrates the training loss from beta = 0",
            );
        }
        if !self.betas.iter().all(|&b| fits_f32(b)) || self.betas.windows(2).any(|w| w[1] <= w[0]) {
            return bad(
                "betas",
                format!("{:?}", self.betas),
                "must be finite in f32 (at most 3.4e38) and strictly ascending",
            );
        }
        for (field, len) in [("epochs", self.epochs.len()), ("a0", self.a0.len())] {
            if len != self.betas.len() {
                return bad(
                    field,
                    format!("{len} values"),
                    &format!("needs one value per beta ({})", self.betas.len()),
                );
            }
        }
        if let Some(e) = self.epochs.iter().find(|&&e| e == 0) {
            return bad(
                "epochs",
                e.to_string(),
                "every chain needs at least one epoch",
            );
        }
        if let Some(&a) = self.a0.iter().find(|&&a| !positive_in_f32(a)) {
            return bad("a0", short(a), POSITIVE_IN_F32);
        }
        let positive = [
            ("repetitions", self.repetitions),
            ("batch_size", self.batch_size),
            ("hidden", self.hidden),
            ("synth.train", self.synth.train),
            ("synth.test", self.synth.test),
            ("mnist.per_class", self.mnist.per_class),
        ];
        for (field, value) in positive {
            if value == 0 {
                return bad(field, "0".into(), "must be at least 1");
            }
        }
        // The bounded loss's floor e^-l_max must stay below 1/2, or psi no longer rises with
        // the predicted probability and the loss's range [min, l_max] is empty.
        if !(fits_f32(self.l_max) && self.l_max > std::f64::consts::LN_2) {
            return bad(
                "l_max",
                short(self.l_max),
                "must exceed ln 2 (0.693: the loss's floor e^-l_max below 1/2) and be finite in \
                 f32",
            );
        }
        // The prior's precision 1 / sigma^2 is what the step computes with.
        if !(positive_in_f32(self.prior_sigma) && positive_in_f32(self.prior_sigma.powi(-2))) {
            return bad(
                "prior_sigma",
                short(self.prior_sigma),
                "must be positive, with it and 1 / prior_sigma^2 in f32's normal range (about \
                 1e-19 to 1e19)",
            );
        }
        if !(self.delta > 0.0 && self.delta < 1.0) {
            return bad("delta", short(self.delta), "must lie in (0, 1)");
        }
        let train = match self.dataset {
            DatasetKind::Synth => self.synth.train,
            DatasetKind::Mnist => self.mnist.per_class.saturating_mul(MNIST_CLASSES),
        };
        if self.batch_size > train {
            return bad(
                "batch_size",
                self.batch_size.to_string(),
                &format!("larger than the training set ({train} points)"),
            );
        }
        if !(self.mnist.std.is_finite() && self.mnist.std > 0.0 && self.mnist.mean.is_finite()) {
            return bad(
                "mnist.std",
                self.mnist.std.to_string(),
                "the normalisation needs a finite mean and a finite std > 0",
            );
        }
        if let Err(too_large) =
            quench_support::budget::check_fits(|| "this grid".into(), self.memory_estimate())
        {
            return bad(
                "repetitions, hidden, synth.train",
                format!(
                    "{}, {}, {} ({} chains)",
                    self.repetitions,
                    self.hidden,
                    self.synth.train,
                    self.chains()
                ),
                &too_large.to_string(),
            );
        }
        // The batched program advances every chain at once, so its steps are the longest
        // chain's epochs times the batches of an epoch, each at least STEP_SECONDS.
        let train = match self.dataset {
            DatasetKind::Synth => self.synth.train as f64,
            DatasetKind::Mnist => self.mnist.per_class as f64 * 10.0,
        };
        let steps = self.max_epochs() as f64 * (train / self.batch_size as f64).ceil();
        if let Err(too_long) = quench_support::budget::check_work(
            || format!("this grid ({steps:.3e} batched steps)"),
            steps,
            STEP_SECONDS,
        ) {
            return bad(
                "epochs",
                format!("{:?}", self.epochs),
                &too_long.to_string(),
            );
        }
        Ok(())
    }

    /// About the most bytes the grid holds at once, in f32: every chain's network
    /// (`inputs x hidden + 2 hidden + 1` values) four times over (its parameters, their
    /// gradient, the step's noise and the update), and the synthetic data set's features, some
    /// eight copies at the peak. MNIST's samples are bounded by its files, read with a
    /// limit of their own. Saturates rather than overflowing.
    pub fn memory_estimate(&self) -> u128 {
        let inputs = match self.dataset {
            DatasetKind::Synth => SYNTH_DIM,
            DatasetKind::Mnist => MNIST_PIXELS,
        } as u128;
        let hidden = self.hidden as u128;
        let network = inputs
            .saturating_mul(hidden)
            .saturating_add(hidden.saturating_mul(2))
            .saturating_add(1);
        let chains = (self.betas.len() as u128).saturating_mul(self.repetitions as u128);
        let data = match self.dataset {
            // Generated in f64, kept in f32 on the host and on the device, and shuffled: about
            // eight f32 copies of each value at the peak (two copies were too few: 1e8
            // training points aborted on an 800 MB allocation under a 4 GB limit).
            DatasetKind::Synth => (self.synth.train as u128)
                .saturating_add(self.synth.test as u128)
                .saturating_mul(inputs + 1)
                .saturating_mul(8),
            DatasetKind::Mnist => 0,
        };
        chains
            .saturating_mul(network)
            .saturating_mul(4)
            .saturating_add(data)
            .saturating_mul(4)
    }

    /// The largest epoch count: epochs of the batched program.
    pub fn max_epochs(&self) -> usize {
        self.epochs.iter().copied().max().unwrap_or(0)
    }

    /// Epochs summed over all chains.
    pub fn chain_epochs(&self) -> u64 {
        self.epochs.iter().map(|&e| e as u64).sum::<u64>() * self.repetitions as u64
    }

    /// Chains in the grid (saturating: a count beyond `usize` is refused by [`Self::check`]).
    pub fn chains(&self) -> usize {
        self.betas.len().saturating_mul(self.repetitions)
    }
}

impl Validate for GridConfig {
    type Error = SgldError;

    /// [`GridConfig::check`], the refusal said to come from the `grid configuration`.
    fn validate(&self) -> Result<(), SgldError> {
        self.check("grid configuration")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(config: &GridConfig) -> &'static str {
        match config.check("test") {
            Err(SgldError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_the_full_synth_grid() {
        let grid = GridConfig::default();
        grid.check("defaults").unwrap();
        assert_eq!(grid.chains(), 240);
        assert_eq!(grid.max_epochs(), 30_000);
        assert_eq!(grid.chain_epochs(), 110_101 * 30);
    }

    #[test]
    fn refuses_grids_the_bound_or_the_sampler_cannot_use() {
        let base = GridConfig::default();
        let with = |f: fn(&mut GridConfig)| {
            let mut c = base.clone();
            f(&mut c);
            c
        };
        assert_eq!(field_of(&with(|c| c.betas[0] = 1.0)), "betas");
        assert_eq!(field_of(&with(|c| c.betas.swap(2, 3))), "betas");
        assert_eq!(field_of(&with(|c| c.epochs.truncate(7))), "epochs");
        assert_eq!(field_of(&with(|c| c.a0[1] = 0.0)), "a0");
        assert_eq!(field_of(&with(|c| c.epochs[0] = 0)), "epochs");
        assert_eq!(field_of(&with(|c| c.batch_size = 0)), "batch_size");
        assert_eq!(field_of(&with(|c| c.delta = 1.0)), "delta");
        assert_eq!(field_of(&with(|c| c.l_max = f64::NAN)), "l_max");
        // Values the f64 holds and the f32 step does not, or that empty the loss's range.
        assert_eq!(field_of(&with(|c| c.l_max = 1e-30)), "l_max");
        assert_eq!(field_of(&with(|c| c.l_max = 0.69)), "l_max");
        assert_eq!(field_of(&with(|c| c.a0[2] = 1e308)), "a0");
        assert_eq!(field_of(&with(|c| c.betas[7] = 1e300)), "betas");
        assert_eq!(field_of(&with(|c| c.prior_sigma = 1e-30)), "prior_sigma");
        assert_eq!(
            field_of(&with(|c| c.batch_size = SYNTH_TRAIN + 1)),
            "batch_size"
        );
        let mut mnist = with(|c| c.dataset = DatasetKind::Mnist);
        mnist.batch_size = 2 * mnist.mnist.per_class;
        mnist.check("test").unwrap();
        mnist.batch_size += 1;
        assert_eq!(field_of(&mnist), "batch_size");
        let message = with(|c| c.a0[2] = 1e308).check("grid.toml").unwrap_err();
        assert!(message.to_string().contains("`a0` = 1e308"), "{message}");
        let message = with(|c| c.repetitions = 0).check("grid.toml").unwrap_err();
        assert!(message.to_string().contains("grid.toml"), "{message}");
    }

    #[test]
    fn grids_beyond_any_hosts_memory_are_refused_before_any_work() {
        // The full grid: 240 chains of 3,001 values and 150 samples, about 12 MB.
        let full = GridConfig::default();
        assert!(
            full.memory_estimate() < 1 << 24,
            "{}",
            full.memory_estimate()
        );
        // Each of these aborted the process in allocation; here large enough that no host's
        // memory holds any of them (the hidden = 1e9 is about 23 TB with the full grid).
        let base = GridConfig::default();
        for config in [
            GridConfig {
                hidden: 1_000_000_000,
                ..base.clone()
            },
            GridConfig {
                repetitions: 1_000_000_000,
                ..base.clone()
            },
            GridConfig {
                synth: SynthConfig {
                    train: 1 << 60,
                    ..SynthConfig::default()
                },
                ..base.clone()
            },
        ] {
            assert!(
                config.memory_estimate() > 1 << 42,
                "{}",
                config.memory_estimate()
            );
            let err = config.check("grid.toml").unwrap_err().to_string();
            assert!(err.contains("grid.toml"), "{err}");
            assert!(err.contains("repetitions, hidden, synth.train"), "{err}");
            assert!(err.contains("in host memory"), "{err}");
        }
    }

    #[test]
    fn grids_that_would_not_end_are_refused_before_any_work() {
        let mut grid = GridConfig::default();
        // The longest chain's 1e12 epochs, each at least one batched step of 1 us.
        *grid.epochs.last_mut().unwrap() = 1_000_000_000_000;
        assert_eq!(field_of(&grid), "epochs");
        let err = grid.check("grid.toml").unwrap_err().to_string();
        assert!(err.contains("batched steps"), "{err}");
    }
}
