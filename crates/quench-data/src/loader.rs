//! The loader: seeded, deterministic batches for one run or for `M` members at once,
//! streamed from the host through worker threads or gathered on the device.
//!
//! The batches of an epoch depend only on the data, the members' seeds, the epoch number,
//! `batch_size`, `shuffle` and `drop_last`: never on the [`Mode`], the number of workers, the
//! prefetch depth or staging.

mod pipeline;
mod plan;

pub use pipeline::MAX_WORKERS;

use quench_kernels::QuenchOps;
use quench_kernels::ops::rows::{select_ints, select_rows};
use quench_kernels::views::ReshapeTo;
use std::sync::Arc;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use crate::{DataError, Dataset};
use pipeline::Pipeline;
use plan::{EpochOrder, Plan};

/// Batching rules and how batches reach the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoaderConfig {
    /// Samples per member in a batch (at least 1).
    pub batch_size: usize,
    /// Whether each epoch visits the samples in a seeded random order (else in data order).
    pub shuffle: bool,
    /// Whether to drop the last batch of an epoch when it is short.
    pub drop_last: bool,
    /// Streaming or device-resident.
    pub mode: Mode,
}

impl Default for LoaderConfig {
    /// Batches of 32, shuffled, the last one kept, streamed without threads.
    fn default() -> Self {
        Self {
            batch_size: 32,
            shuffle: true,
            drop_last: false,
            mode: Mode::Streaming {
                num_workers: 0,
                prefetch: 2,
                staging: false,
            },
        }
    }
}

/// How batches reach the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each batch is assembled on the host and uploaded.
    Streaming {
        /// Threads that assemble batches, kept alive across epochs; with 0 the uploading
        /// thread assembles them itself.
        num_workers: usize,
        /// Finished batches each worker, and the staging thread, may hold ahead of the
        /// consumer (at least 1).
        prefetch: usize,
        /// Whether a staging thread copies each batch into the backend's page-locked memory
        /// (`Backend::staging`), so that the caller's upload is an asynchronous transfer that
        /// overlaps its compute. The caller uploads in both cases: a tensor made on another
        /// thread would belong to that thread's stream on a GPU backend (see
        /// `loader::pipeline`).
        staging: bool,
    },
    /// The data is uploaded once; each epoch uploads one shuffled index tensor, and each batch
    /// is gathered from it on the device (`QuenchOps::select_rows`) with no host work per step.
    Resident,
}

impl Mode {
    /// Streaming with no threads: the caller assembles and uploads each batch itself, one
    /// ahead (the original workloads' loader).
    pub const ON_CALLER: Mode = Mode::Streaming {
        num_workers: 0,
        prefetch: 1,
        staging: false,
    };
}

/// One batch on the device, with a leading member axis.
#[derive(Debug, Clone)]
pub struct Batch<B: Backend> {
    /// Features `[members, batch, sample_len]`, each sample flattened row-major.
    pub features: Tensor<B, 3>,
    /// Class labels `[members, batch]`.
    pub labels: Tensor<B, 2, Int>,
}

impl<B: Backend> Batch<B> {
    /// Merges the member and batch axes: features `[members * batch, sample_len]`, labels
    /// `[members * batch]`. For a single member this is the plain batch.
    pub fn flatten(self) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
        let [members, batch, width] = self.features.dims();
        (
            self.features.reshape_to([members * batch, width]),
            self.labels.reshape_to([members * batch]),
        )
    }
}

/// Batches for `M` members (independent runs, chains, seeds), each with its own shuffle.
///
/// Member `m` draws its order in epoch `e` from `seeds[m]` and `e` alone. A streaming loader's
/// threads live until it is dropped, which joins them, mid-epoch or not.
pub struct Loader<B: QuenchOps> {
    plan: Arc<Plan>,
    source: Source<B>,
}

/// Where batches come from.
enum Source<B: QuenchOps> {
    Streaming(Pipeline<B>),
    Resident(Resident<B>),
}

/// The data sets on the device, stacked: features `[datasets * len, sample_len]`, labels
/// `[datasets * len]`.
struct Resident<B: QuenchOps> {
    device: B::Device,
    features: Tensor<B, 2>,
    labels: Tensor<B, 1, Int>,
}

impl<B: QuenchOps> Loader<B> {
    /// A loader for `seeds.len()` members over `datasets`: one data set shared by all members,
    /// or one per member (same length and sample shape).
    ///
    /// Refused: no seed, a data-set count that is neither 1 nor `seeds.len()`, data sets of
    /// different sizes, `batch_size` 0, no batch per epoch, `prefetch` 0; also a thread that
    /// the operating system will not start.
    pub fn new(
        datasets: Vec<Arc<Dataset>>,
        seeds: &[u64],
        config: &LoaderConfig,
        device: &B::Device,
    ) -> Result<Self, DataError> {
        let plan = Arc::new(Plan::new(
            datasets,
            seeds,
            config.batch_size,
            config.shuffle,
            config.drop_last,
        )?);
        let source = match config.mode {
            Mode::Streaming { prefetch: 0, .. } => {
                return Err(DataError::invalid("prefetch", 0, "must be at least 1"));
            }
            Mode::Streaming {
                num_workers,
                prefetch,
                staging,
            } => Source::Streaming(Pipeline::spawn(
                &plan,
                device,
                num_workers,
                prefetch,
                staging,
            )?),
            Mode::Resident => Source::Resident(Resident::upload(&plan, device)),
        };
        Ok(Self { plan, source })
    }

    /// Number of members, `M`.
    pub fn members(&self) -> usize {
        self.plan.members()
    }

    /// Batches in every epoch.
    pub fn batches(&self) -> usize {
        self.plan.batches()
    }

    /// The batches of epoch `epoch` in host memory, for a caller that computes on the host:
    /// the samples and order of [`epoch`](Self::epoch)'s batches, as features `[members,
    /// batch, sample_len]` and labels `[members, batch]` row-major. Neither the threads nor
    /// the device take part (build the loader with [`Mode::ON_CALLER`] to start none).
    pub fn host_epoch(&self, epoch: u64) -> impl Iterator<Item = (Vec<f32>, Vec<i64>)> + '_ {
        let order = self.plan.order(epoch);
        (0..self.plan.batches()).map(move |k| self.plan.gather(&order, k))
    }

    /// The batches of epoch `epoch`, in order. Dropping the iterator early stops the threads'
    /// work on it.
    pub fn epoch(&mut self, epoch: u64) -> Epoch<'_, B> {
        let order = self.plan.order(epoch);
        let source = match &mut self.source {
            Source::Streaming(pipeline) => {
                pipeline.start(order);
                EpochSource::Streaming(pipeline)
            }
            Source::Resident(resident) => EpochSource::Resident {
                index: resident.index(&self.plan, &order),
                resident,
            },
        };
        Epoch {
            plan: &self.plan,
            source,
            next: 0,
        }
    }
}

impl<B: QuenchOps> Resident<B> {
    /// Uploads the plan's data sets.
    fn upload(plan: &Plan, device: &B::Device) -> Self {
        let rows = plan.datasets().len() * plan.len();
        let features = plan
            .datasets()
            .iter()
            .flat_map(|d| d.features().iter().copied())
            .collect();
        let labels = plan
            .datasets()
            .iter()
            .flat_map(|d| d.labels().iter().copied())
            .collect();
        Self {
            device: device.clone(),
            features: Tensor::from_data(
                TensorData::new(features, [rows, plan.sample_len()]),
                device,
            ),
            labels: Tensor::from_data(TensorData::new::<i64, _>(labels, [rows]), device),
        }
    }

    /// Rows of the stacked data for every batch of `order`, batch after batch, each batch
    /// member after member: `[members * samples per epoch]`.
    fn index(&self, plan: &Plan, order: &EpochOrder) -> Tensor<B, 1, Int> {
        let index: Vec<i64> = (0..plan.batches())
            .flat_map(|k| plan.samples(order, k))
            .map(|(dataset, sample)| (dataset * plan.len() + sample) as i64)
            .collect();
        let len = index.len();
        Tensor::from_data(TensorData::new(index, [len]), &self.device)
    }

    /// Batch `k`, gathered on the device from `index`.
    fn gather(&self, plan: &Plan, index: &Tensor<B, 1, Int>, k: usize) -> Batch<B> {
        let (members, rows) = (plan.members(), plan.rows(k));
        let batch = rows.len();
        let index = index
            .clone()
            .slice(members * rows.start..members * rows.end);
        Batch {
            features: select_rows(self.features.clone(), index.clone()).reshape_to([
                members,
                batch,
                plan.sample_len(),
            ]),
            labels: select_ints(self.labels.clone(), index).reshape_to([members, batch]),
        }
    }
}

/// The batches of one epoch; see [`Loader::epoch`].
pub struct Epoch<'a, B: QuenchOps> {
    plan: &'a Plan,
    source: EpochSource<'a, B>,
    next: usize,
}

/// Where an epoch's batches come from.
enum EpochSource<'a, B: QuenchOps> {
    Streaming(&'a mut Pipeline<B>),
    Resident {
        resident: &'a Resident<B>,
        /// This epoch's rows, `[members * samples per epoch]`.
        index: Tensor<B, 1, Int>,
    },
}

impl<B: QuenchOps> Iterator for Epoch<'_, B> {
    type Item = Batch<B>;

    fn next(&mut self) -> Option<Batch<B>> {
        let k = self.next;
        if k == self.plan.batches() {
            return None;
        }
        self.next += 1;
        Some(match &mut self.source {
            EpochSource::Streaming(pipeline) => pipeline.next(k),
            EpochSource::Resident { resident, index } => resident.gather(self.plan, index, k),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.plan.batches() - self.next;
        (left, Some(left))
    }
}

impl<B: QuenchOps> ExactSizeIterator for Epoch<'_, B> {}

impl<B: QuenchOps> Drop for Epoch<'_, B> {
    fn drop(&mut self) {
        if let EpochSource::Streaming(pipeline) = &mut self.source {
            pipeline.finish(self.next < self.plan.batches());
        }
    }
}
