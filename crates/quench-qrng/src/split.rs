//! Seeded train / validation / test splits: the test part is held out first and never seen
//! during training or model selection; the validation part is carved from the training part.

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use super::{QrngError, sub_seed};

/// Purpose tag of the split's random stream (see [`sub_seed`]).
const SPLIT_STREAM: u64 = 1;

/// Sample indices of the three parts of one split; together a permutation of `0..len`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Samples the model trains on.
    pub train: Vec<usize>,
    /// Samples that select the model (plateau schedule, early stopping, best weights).
    pub validation: Vec<usize>,
    /// Samples reported on, untouched until the end.
    pub test: Vec<usize>,
}

impl Split {
    /// Sizes `(train, validation, test)` of a split of `len` samples: the training part is
    /// `floor(len (1 - test_fraction))` (PyTorch's `int(0.8 len)` for 0.2), the rest is the
    /// test part, and `floor(training part x validation_fraction)` of the training part is
    /// the validation part.
    ///
    /// Refused: fractions outside `(0, 1)`, or sizes that leave a part empty.
    pub fn sizes(
        len: usize,
        test_fraction: f64,
        validation_fraction: f64,
    ) -> Result<(usize, usize, usize), QrngError> {
        for (field, value) in [
            ("test_fraction", test_fraction),
            ("validation_fraction", validation_fraction),
        ] {
            if !(value > 0.0 && value < 1.0) {
                return Err(QrngError::config(
                    field,
                    value,
                    "must lie strictly between 0 and 1",
                ));
            }
        }
        let train_part = (len as f64 * (1.0 - test_fraction)).floor() as usize;
        let validation = (train_part as f64 * validation_fraction).floor() as usize;
        if validation == 0 || train_part == validation || train_part == len {
            return Err(QrngError::config(
                "samples",
                len,
                "too few to give every part of the split at least one sample",
            ));
        }
        Ok((train_part - validation, validation, len - train_part))
    }

    /// Splits `len` samples, in a random order drawn from `seed`, into parts of the
    /// [`sizes`](Self::sizes): the training part first, its last samples the validation part.
    pub fn draw(
        len: usize,
        test_fraction: f64,
        validation_fraction: f64,
        seed: u64,
    ) -> Result<Self, QrngError> {
        let (train, validation, _) = Self::sizes(len, test_fraction, validation_fraction)?;
        let train_part = train + validation;
        let mut order: Vec<usize> = (0..len).collect();
        order.shuffle(&mut StdRng::seed_from_u64(sub_seed(seed, SPLIT_STREAM)));
        let test = order.split_off(train_part);
        let validation = order.split_off(train);
        Ok(Self {
            train: order,
            validation,
            test,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_have_the_documented_sizes_and_cover_every_sample_once() {
        let split = Split::draw(6000, 0.2, 0.2, 89).unwrap();
        assert_eq!(
            (split.train.len(), split.validation.len(), split.test.len()),
            (3840, 960, 1200)
        );
        let mut all: Vec<usize> = [&split.train, &split.validation, &split.test]
            .into_iter()
            .flatten()
            .copied()
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..6000).collect::<Vec<_>>());
    }

    #[test]
    fn each_seed_has_its_own_split() {
        let a = Split::draw(100, 0.2, 0.25, 89).unwrap();
        assert_eq!(a, Split::draw(100, 0.2, 0.25, 89).unwrap());
        assert_ne!(a.test, Split::draw(100, 0.2, 0.25, 90).unwrap().test);
    }

    #[test]
    fn refuses_empty_parts_and_bad_fractions() {
        assert!(Split::draw(3, 0.2, 0.2, 1).is_err());
        assert!(Split::draw(100, 0.0, 0.2, 1).is_err());
        assert!(Split::draw(100, 0.2, 1.0, 1).is_err());
        assert!(Split::draw(100, f64::NAN, 0.2, 1).is_err());
        let tiny = Split::draw(5, 0.2, 0.5, 1).unwrap();
        assert_eq!(
            (tiny.train.len(), tiny.validation.len(), tiny.test.len()),
            (2, 2, 1)
        );
    }
}
