//! What a grid produced: every chain's final scores, and per inverse temperature their mean and
//! spread over repetitions, the generalisation gap and the bound.

use std::fmt;

use quench_support::stats::max_or_nan;

use super::{Bound, GridConfig, GridData, pac_bayes_bounds};
use quench_support::stats::MeanStd;

/// One chain's final state, scored on its whole training and test splits.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChainOutcome {
    /// Index of the chain's inverse temperature in the grid.
    pub beta_index: usize,
    /// Its repetition.
    pub repetition: usize,
    /// Bounded cross-entropy on the training split, rescaled to `[0, 1]`.
    pub train_loss: f64,
    /// Bounded cross-entropy on the test split, rescaled to `[0, 1]`.
    pub test_loss: f64,
    /// 0-1 error on the training split.
    pub train_error: f64,
    /// 0-1 error on the test split.
    pub test_error: f64,
}

/// The chains of one inverse temperature, summarised over repetitions.
#[derive(Debug, Clone, PartialEq)]
pub struct BetaSummary {
    /// The inverse temperature.
    pub beta: f64,
    /// Epochs of its chains.
    pub epochs: usize,
    /// Initial step size of its chains.
    pub a0: f64,
    /// Training loss (`[0, 1]`).
    pub train_loss: MeanStd,
    /// Test loss (`[0, 1]`).
    pub test_loss: MeanStd,
    /// Training 0-1 error.
    pub train_error: MeanStd,
    /// Test 0-1 error.
    pub test_error: MeanStd,
    /// Generalisation gap of the loss, test minus training, per repetition.
    pub loss_gap: MeanStd,
    /// Generalisation gap of the 0-1 error, per repetition.
    pub error_gap: MeanStd,
    /// The PAC-Bayes bound on the loss gap, from the mean training losses.
    pub bound: Bound,
}

/// Everything a grid produced.
#[derive(Debug, Clone, PartialEq)]
pub struct GridResult {
    /// What the data was and where it came from.
    pub data: String,
    /// Training points per chain (the bound's `n`).
    pub n_train: usize,
    /// Test points per chain: the resolution of a test error is `1 / n_test`.
    pub n_test: usize,
    /// Every chain, ordered by inverse temperature, then repetition.
    pub chains: Vec<ChainOutcome>,
    /// One summary per inverse temperature, ascending.
    pub betas: Vec<BetaSummary>,
}

impl GridResult {
    /// Summarises `chains` (any order) of the grid `config`, run on `data`.
    pub fn new(config: &GridConfig, data: &GridData, mut chains: Vec<ChainOutcome>) -> Self {
        let n_train = data.n_train();
        chains.sort_by_key(|c| (c.beta_index, c.repetition));
        let stat = |k: usize, f: fn(&ChainOutcome) -> f64| {
            let values: Vec<f64> = chains.iter().filter(|c| c.beta_index == k).map(f).collect();
            MeanStd::of(&values)
        };
        let train_means: Vec<f64> = (0..config.betas.len())
            .map(|k| stat(k, |c| c.train_loss).mean)
            .collect();
        let bounds = pac_bayes_bounds(&config.betas, &train_means, n_train, config.delta);
        let betas = bounds
            .into_iter()
            .enumerate()
            .map(|(k, bound)| BetaSummary {
                beta: config.betas[k],
                epochs: config.epochs[k],
                a0: config.a0[k],
                train_loss: stat(k, |c| c.train_loss),
                test_loss: stat(k, |c| c.test_loss),
                train_error: stat(k, |c| c.train_error),
                test_error: stat(k, |c| c.test_error),
                loss_gap: stat(k, |c| c.test_loss - c.train_loss),
                error_gap: stat(k, |c| c.test_error - c.train_error),
                bound,
            })
            .collect();
        Self {
            data: data.description.clone(),
            n_train,
            n_test: data.n_test(),
            chains,
            betas,
        }
    }

    /// The largest difference between this grid's chains and `other`'s (final train and test
    /// loss and error, chain by chain): what must be rounding-sized when two executions of
    /// one grid differ only in how they are scheduled. NaN when any value is, infinite when
    /// the chains do not pair up by (beta, repetition).
    pub fn max_chain_difference(&self, other: &Self) -> f64 {
        let paired = self.chains.len() == other.chains.len()
            && self
                .chains
                .iter()
                .zip(&other.chains)
                .all(|(a, b)| (a.beta_index, a.repetition) == (b.beta_index, b.repetition));
        if !paired {
            return f64::INFINITY;
        }
        max_or_nan(self.chains.iter().zip(&other.chains).flat_map(|(a, b)| {
            [
                a.train_loss - b.train_loss,
                a.test_loss - b.test_loss,
                a.train_error - b.train_error,
                a.test_error - b.test_error,
            ]
            .map(f64::abs)
        }))
    }
}

impl fmt::Display for GridResult {
    /// The per-beta table: losses are the bounded cross-entropy rescaled to `[0, 1]`, errors
    /// are 0-1 errors, `±` is the standard deviation over repetitions, and `bound` bounds the
    /// loss gap.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "data: {}", self.data)?;
        writeln!(
            f,
            "{:>7} {:>6} {:>15} {:>15} {:>15} {:>15} {:>15} {:>8} {:>8}",
            "beta",
            "epochs",
            "train loss",
            "test loss",
            "train error",
            "test error",
            "loss gap",
            "KL",
            "bound"
        )?;
        for b in &self.betas {
            writeln!(
                f,
                "{:>7} {:>6} {:>15} {:>15} {:>15} {:>15} {:>15} {:>8.3} {:>8.4}",
                b.beta,
                b.epochs,
                b.train_loss.to_string(),
                b.test_loss.to_string(),
                b.train_error.to_string(),
                b.test_error.to_string(),
                b.loss_gap.to_string(),
                b.bound.kl,
                b.bound.gap
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SynthConfig;

    fn outcome(beta_index: usize, repetition: usize, train: f64, test: f64) -> ChainOutcome {
        ChainOutcome {
            beta_index,
            repetition,
            train_loss: train,
            test_loss: test,
            train_error: train / 2.0,
            test_error: test / 2.0,
        }
    }

    #[test]
    fn summarises_each_beta_over_its_repetitions() {
        let config = GridConfig {
            betas: vec![0.0, 10.0],
            epochs: vec![1, 5],
            a0: vec![1e-7, 0.1],
            repetitions: 2,
            ..GridConfig::default()
        };
        let chains = vec![
            outcome(1, 1, 0.2, 0.5),
            outcome(0, 0, 0.6, 0.6),
            outcome(1, 0, 0.1, 0.3),
            outcome(0, 1, 0.4, 0.4),
        ];
        let data = GridData::synth(&SynthConfig::default(), 2, 0);
        let result = GridResult::new(&config, &data, chains);
        assert_eq!((result.n_train, result.n_test), (50, 100));
        assert_eq!(result.chains[0].beta_index, 0);
        assert_eq!(result.chains[3].repetition, 1);
        let hot = &result.betas[1];
        assert_eq!((hot.beta, hot.epochs), (10.0, 5));
        assert!((hot.train_loss.mean - 0.15).abs() < 1e-12);
        assert!((hot.train_loss.std - 0.05).abs() < 1e-12);
        assert!((hot.loss_gap.mean - 0.25).abs() < 1e-12);
        assert!((hot.test_error.mean - 0.2).abs() < 1e-12);
        // The bound integrates the beta = 0 mean training loss (0.5) over [0, 10].
        assert!((hot.bound.integral - 5.0).abs() < 1e-12);
        let table = result.to_string();
        assert!(
            table.contains("SYNTH") && table.contains("0.1500±0.0500"),
            "{table}"
        );
    }
}
