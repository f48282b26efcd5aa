//! SYNTH, the linearly separable 4-d data of the Gibbs-posterior SGLD workload.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

use crate::Dataset;

/// Dimension of a SYNTH sample.
pub const SYNTH_DIM: usize = 4;
/// Training points per repetition in the SGLD workload.
pub const SYNTH_TRAIN: usize = 50;
/// Test points per repetition in the SGLD workload.
pub const SYNTH_TEST: usize = 100;

/// How SYNTH labels its points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthLabels {
    /// `y = 1[x . w > 0]`: separable by the hidden teacher `w`.
    Teacher,
    /// `y ~ Bernoulli(1/2)` independently of `x`, on both splits: nothing to learn, so a
    /// generalisation bound must stay vacuous.
    Random,
}

/// One repetition of SYNTH: the two splits and the teacher that labels them.
#[derive(Debug, Clone, PartialEq)]
pub struct Synth {
    /// Training split, samples `[4]`, labels 0/1.
    pub train: Dataset,
    /// Test split, samples `[4]`, labels 0/1.
    pub test: Dataset,
    /// The teacher `w = |z| g / ||g||`, `[4]`.
    pub teacher: [f32; SYNTH_DIM],
}

impl Synth {
    /// Draws repetition `repetition` (its own seed) with `n_train` and `n_test` points
    /// (the workload uses [`SYNTH_TRAIN`] and [`SYNTH_TEST`]).
    ///
    /// With `g ~ N(0, I_4)` and `z ~ N(0, 1)`, the teacher is `w = |z| g / ||g||`; every
    /// `x ~ N(0, I_4)`. Draw order from `StdRng::seed_from_u64(repetition)`: `g`, `z`, the
    /// training `x`, the test `x`, then (random labels only) the training and test labels.
    pub fn generate(repetition: u64, n_train: usize, n_test: usize, labels: SynthLabels) -> Self {
        crate::loads::loaded(format_args!(
            "SYNTH repetition {repetition}: {n_train} training and {n_test} test points"
        ));
        let mut rng = StdRng::seed_from_u64(repetition);
        let g: [f32; SYNTH_DIM] = std::array::from_fn(|_| rng.sample(StandardNormal));
        let z: f32 = rng.sample(StandardNormal);
        let norm = g.iter().map(|v| v * v).sum::<f32>().sqrt();
        let teacher = g.map(|v| z.abs() * v / norm);
        let mut draw_x = |n: usize| -> Vec<f32> {
            (0..n * SYNTH_DIM)
                .map(|_| rng.sample(StandardNormal))
                .collect()
        };
        let (x_train, x_test) = (draw_x(n_train), draw_x(n_test));
        let mut label = |x: &[f32]| -> i64 {
            match labels {
                SynthLabels::Teacher => {
                    i64::from(x.iter().zip(&teacher).map(|(a, b)| a * b).sum::<f32>() > 0.0)
                }
                SynthLabels::Random => i64::from(rng.random_bool(0.5)),
            }
        };
        let y_train: Vec<i64> = x_train.chunks_exact(SYNTH_DIM).map(&mut label).collect();
        let y_test: Vec<i64> = x_test.chunks_exact(SYNTH_DIM).map(&mut label).collect();
        let split = |x, y| {
            Dataset::new(x, y, vec![SYNTH_DIM]).expect("one label per 4-d point by construction")
        };
        Self {
            train: split(x_train, y_train),
            test: split(x_test, y_test),
            teacher,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repetition_is_reproducible_and_differs_from_the_next() {
        let a = Synth::generate(3, SYNTH_TRAIN, SYNTH_TEST, SynthLabels::Teacher);
        assert_eq!(
            a,
            Synth::generate(3, SYNTH_TRAIN, SYNTH_TEST, SynthLabels::Teacher)
        );
        assert_ne!(
            a.train,
            Synth::generate(4, SYNTH_TRAIN, SYNTH_TEST, SynthLabels::Teacher).train
        );
        assert_eq!((a.train.len(), a.test.len()), (SYNTH_TRAIN, SYNTH_TEST));
        assert_eq!(a.train.sample_shape(), &[SYNTH_DIM]);
    }

    #[test]
    fn teacher_labels_are_separable_by_the_teacher() {
        for repetition in 0..10 {
            let synth = Synth::generate(repetition, SYNTH_TRAIN, SYNTH_TEST, SynthLabels::Teacher);
            for split in [&synth.train, &synth.test] {
                for (i, &y) in split.labels().iter().enumerate() {
                    let margin: f32 = split
                        .sample(i)
                        .iter()
                        .zip(&synth.teacher)
                        .map(|(a, b)| a * b)
                        .sum();
                    assert_eq!(y, i64::from(margin > 0.0));
                }
            }
        }
    }

    #[test]
    fn random_labels_keep_the_points_and_ignore_the_teacher() {
        let teacher = Synth::generate(7, 2000, 0, SynthLabels::Teacher);
        let random = Synth::generate(7, 2000, 0, SynthLabels::Random);
        assert_eq!(teacher.train.features(), random.train.features());
        let agree = (teacher.train.labels().iter())
            .zip(random.train.labels())
            .filter(|(a, b)| a == b)
            .count();
        // Independent fair labels agree with the teacher about half the time (sd 11 of 2000).
        assert!((900..1100).contains(&agree), "{agree} of 2000 agree");
    }
}
