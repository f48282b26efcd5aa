//! The in-memory labelled data set that the generators produce and the loader serves.

use crate::DataError;

/// Labelled samples on the host: features `[len, sample_shape...]` as `f32`, one class label
/// per sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    features: Vec<f32>,
    labels: Vec<i64>,
    sample_shape: Vec<usize>,
}

impl Dataset {
    /// A data set of `labels.len()` samples of shape `sample_shape`, whose features lie
    /// row-major in `features`.
    ///
    /// Refused: an empty `sample_shape`, a zero dimension in it, or a `features` length other
    /// than `labels.len()` times the sample size.
    pub fn new(
        features: Vec<f32>,
        labels: Vec<i64>,
        sample_shape: Vec<usize>,
    ) -> Result<Self, DataError> {
        if sample_shape.is_empty() || sample_shape.contains(&0) {
            return Err(DataError::invalid(
                "sample_shape",
                format!("{sample_shape:?}"),
                "needs at least one dimension, none of them zero",
            ));
        }
        let sample_len: usize = sample_shape.iter().product();
        if Some(features.len()) != labels.len().checked_mul(sample_len) {
            return Err(DataError::Invalid {
                field: "features",
                value: format!("{} values", features.len()),
                reason: "must be one sample of `sample_shape` per label",
            });
        }
        Ok(Self {
            features,
            labels,
            sample_shape,
        })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Shape of one sample, e.g. `[28, 28]` for an image.
    pub fn sample_shape(&self) -> &[usize] {
        &self.sample_shape
    }

    /// Number of features in one sample (the product of [`Self::sample_shape`]).
    pub fn sample_len(&self) -> usize {
        self.sample_shape.iter().product()
    }

    /// All features, `[len, sample_len]` row-major.
    pub fn features(&self) -> &[f32] {
        &self.features
    }

    /// The features of sample `index`, `[sample_len]`; panics if `index >= len`.
    pub fn sample(&self, index: usize) -> &[f32] {
        let n = self.sample_len();
        &self.features[index * n..(index + 1) * n]
    }

    /// All labels, `[len]`.
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }

    /// The samples at `indices`, in that order (repeats allowed): for splits and class subsets.
    pub fn subset(&self, indices: &[usize]) -> Result<Self, DataError> {
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.len()) {
            return Err(DataError::Invalid {
                field: "indices",
                value: bad.to_string(),
                reason: "is not the index of a sample",
            });
        }
        Ok(Self {
            features: indices
                .iter()
                .flat_map(|&i| self.sample(i).iter().copied())
                .collect(),
            labels: indices.iter().map(|&i| self.labels[i]).collect(),
            sample_shape: self.sample_shape.clone(),
        })
    }

    /// The samples of classes `negative` and `positive` only, relabelled 0 and 1: the binary
    /// tasks (MNIST digits 0 and 1, Fashion-MNIST classes 0 and 1) of the SGLD and loader
    /// workloads.
    pub fn binary(&self, negative: i64, positive: i64) -> Result<Self, DataError> {
        if negative == positive {
            return Err(DataError::Invalid {
                field: "classes",
                value: format!("{negative}, {positive}"),
                reason: "must be two different classes",
            });
        }
        let keep: Vec<usize> = (0..self.len())
            .filter(|&i| self.labels[i] == negative || self.labels[i] == positive)
            .collect();
        let mut two = self.subset(&keep)?;
        for label in &mut two.labels {
            *label = i64::from(*label == positive);
        }
        Ok(two)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_keeps_two_classes_and_relabels_them() {
        let d = Dataset::new(vec![0.0, 1.0, 2.0, 3.0, 4.0], vec![3, 7, 1, 7, 3], vec![1]).unwrap();
        let b = d.binary(3, 7).unwrap();
        assert_eq!(b.labels(), &[0, 1, 1, 0]);
        assert_eq!(b.features(), &[0.0, 1.0, 3.0, 4.0]);
        assert!(d.binary(3, 3).is_err());
    }

    #[test]
    fn refuses_features_that_do_not_match_the_labels() {
        assert!(Dataset::new(vec![0.0; 5], vec![0, 1], vec![2]).is_err());
        assert!(Dataset::new(vec![0.0; 4], vec![0, 1], vec![2, 0]).is_err());
        assert!(Dataset::new(vec![0.0; 2], vec![0, 1], vec![]).is_err());
    }

    #[test]
    fn subset_takes_samples_in_the_given_order() {
        let data = Dataset::new(
            vec![0.0, 1.0, 10.0, 11.0, 20.0, 21.0],
            vec![0, 1, 2],
            vec![2],
        )
        .unwrap();
        let sub = data.subset(&[2, 0, 2]).unwrap();
        assert_eq!(sub.features(), &[20.0, 21.0, 0.0, 1.0, 20.0, 21.0]);
        assert_eq!(sub.labels(), &[2, 0, 2]);
        assert!(data.subset(&[3]).is_err());
    }
}
