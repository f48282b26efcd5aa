//! What a batch is made of: the data, the members, and each epoch's sample order.

use std::ops::Range;
use std::sync::Arc;

use burn::tensor::TensorData;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::{DataError, Dataset};

/// The data and batching rules of a loader, shared by all its threads.
#[derive(Debug)]
pub(crate) struct Plan {
    /// One data set shared by all members, or one per member; all of the same length and
    /// sample shape.
    datasets: Vec<Arc<Dataset>>,
    /// Shuffle seed of each member; its length is the number of members.
    seeds: Vec<u64>,
    batch_size: usize,
    shuffle: bool,
    drop_last: bool,
}

/// Every member's sample order for one epoch: `[members][len]` permutations.
#[derive(Debug)]
pub(crate) struct EpochOrder(Vec<Vec<usize>>);

/// A batch assembled on the host: features `[members, batch, sample_len]`, labels
/// `[members, batch]`.
#[derive(Debug)]
pub(crate) struct HostBatch {
    pub features: TensorData,
    pub labels: TensorData,
}

impl Plan {
    /// Checks that the data sets fit the members and yield at least one batch.
    pub fn new(
        datasets: Vec<Arc<Dataset>>,
        seeds: &[u64],
        batch_size: usize,
        shuffle: bool,
        drop_last: bool,
    ) -> Result<Self, DataError> {
        if seeds.is_empty() {
            return Err(DataError::invalid(
                "seeds",
                "[]",
                "one seed per member, at least one",
            ));
        }
        if datasets.len() != 1 && datasets.len() != seeds.len() {
            return Err(DataError::Invalid {
                field: "datasets",
                value: format!("{} data sets for {} members", datasets.len(), seeds.len()),
                reason: "give one data set for all members or one per member",
            });
        }
        let first = &datasets[0];
        if let Some(other) = datasets
            .iter()
            .find(|d| d.len() != first.len() || d.sample_shape() != first.sample_shape())
        {
            return Err(DataError::Invalid {
                field: "datasets",
                value: format!("{} samples of {:?}", other.len(), other.sample_shape()),
                reason: "every member's data set needs as many samples, of the same shape, as the first",
            });
        }
        if batch_size == 0 {
            return Err(DataError::invalid("batch_size", 0, "must be at least 1"));
        }
        let plan = Self {
            datasets,
            seeds: seeds.to_vec(),
            batch_size,
            shuffle,
            drop_last,
        };
        if plan.batches() == 0 {
            return Err(DataError::Invalid {
                field: "batch_size",
                value: batch_size.to_string(),
                reason: "leaves no batch: the data set is empty, or smaller than one batch with drop_last",
            });
        }
        Ok(plan)
    }

    /// Number of members.
    pub fn members(&self) -> usize {
        self.seeds.len()
    }

    /// Samples in each member's data set.
    pub fn len(&self) -> usize {
        self.datasets[0].len()
    }

    /// Features per sample.
    pub fn sample_len(&self) -> usize {
        self.datasets[0].sample_len()
    }

    /// The distinct data sets, in the order that [`Self::samples`] numbers them.
    pub fn datasets(&self) -> &[Arc<Dataset>] {
        &self.datasets
    }

    /// Batches in an epoch.
    pub fn batches(&self) -> usize {
        if self.drop_last {
            self.len() / self.batch_size
        } else {
            self.len().div_ceil(self.batch_size)
        }
    }

    /// Positions in the epoch order that batch `k` covers.
    pub fn rows(&self, k: usize) -> Range<usize> {
        k * self.batch_size..((k + 1) * self.batch_size).min(self.len())
    }

    /// The sample order of `epoch`: for each member, a permutation drawn from its seed and the
    /// epoch number alone (the identity without shuffling).
    pub fn order(&self, epoch: u64) -> EpochOrder {
        EpochOrder(
            self.seeds
                .iter()
                .map(|&seed| {
                    let mut order: Vec<usize> = (0..self.len()).collect();
                    if self.shuffle {
                        order.shuffle(&mut epoch_rng(seed, epoch));
                    }
                    order
                })
                .collect(),
        )
    }

    /// `(data set, sample)` of every row of batch `k`, member after member.
    pub fn samples<'a>(
        &'a self,
        order: &'a EpochOrder,
        k: usize,
    ) -> impl Iterator<Item = (usize, usize)> + 'a {
        let shared = self.datasets.len() == 1;
        order.0.iter().enumerate().flat_map(move |(member, order)| {
            let dataset = if shared { 0 } else { member };
            order[self.rows(k)]
                .iter()
                .map(move |&sample| (dataset, sample))
        })
    }

    /// Copies batch `k` of `order` out of the data sets.
    pub fn assemble(&self, order: &EpochOrder, k: usize) -> HostBatch {
        let (members, batch, width) = (self.members(), self.rows(k).len(), self.sample_len());
        let (features, labels) = self.gather(order, k);
        HostBatch {
            features: TensorData::new(features, [members, batch, width]),
            labels: TensorData::new(labels, [members, batch]),
        }
    }

    /// Batch `k` of `order` as plain values: features `[members, batch, sample_len]` and labels
    /// `[members, batch]`, row-major.
    pub fn gather(&self, order: &EpochOrder, k: usize) -> (Vec<f32>, Vec<i64>) {
        let (members, batch, width) = (self.members(), self.rows(k).len(), self.sample_len());
        let mut features = Vec::with_capacity(members * batch * width);
        let mut labels = Vec::with_capacity(members * batch);
        for (dataset, sample) in self.samples(order, k) {
            features.extend_from_slice(self.datasets[dataset].sample(sample));
            labels.push(self.datasets[dataset].labels()[sample]);
        }
        (features, labels)
    }
}

/// The generator of one member's order in one epoch: seed and epoch fill separate bytes of
/// the key, so no two `(seed, epoch)` pairs share a stream.
fn epoch_rng(seed: u64, epoch: u64) -> StdRng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    StdRng::from_seed(key)
}
