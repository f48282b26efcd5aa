//! The streaming pipeline: worker threads assemble host batches, a staging thread uploads
//! them, and bounded queues between the stages limit how far each runs ahead.
//!
//! Shutdown needs no flag: every thread returns as soon as one of its queues is closed, and
//! [`Pipeline`] closes its queues before it joins the threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::{self, JoinHandle};

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use super::Batch;
use super::plan::{EpochOrder, HostBatch, Plan};
use crate::DataError;

/// An item of a batch queue: a batch, or the end of the sender's part of the epoch.
enum Msg<T> {
    Batch(T),
    End,
}

/// Moves a host batch to `device`, on the calling thread.
pub(crate) fn upload<B: Backend>(host: HostBatch, device: &B::Device) -> Batch<B> {
    Batch {
        features: Tensor::from_data(host.features, device),
        labels: Tensor::from_data(host.labels, device),
    }
}

/// Joins its threads when dropped.
#[derive(Default)]
struct Threads(Vec<JoinHandle<()>>);

impl Threads {
    fn spawn(
        &mut self,
        name: String,
        body: impl FnOnce() + Send + 'static,
    ) -> Result<(), DataError> {
        let handle = thread::Builder::new()
            .name(name)
            .spawn(body)
            .map_err(DataError::Spawn)?;
        self.0.push(handle);
        Ok(())
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        for handle in self.0.drain(..) {
            // A thread that panicked has printed its message, and a destructor has no one to
            // report it to.
            let _ = handle.join();
        }
    }
}

/// One worker as seen by the thread that collects its batches.
struct WorkerLink {
    jobs: Sender<Arc<EpochOrder>>,
    batches: Receiver<Msg<HostBatch>>,
    /// Whether its end-of-epoch marker has been received.
    ended: bool,
}

/// The ordered stream of host batches. Without workers, batches are assembled on the spot;
/// with `W` workers, batch `k` comes from worker `k % W`, so the order never depends on `W`.
struct Feed {
    plan: Arc<Plan>,
    workers: Vec<WorkerLink>,
    order: Option<Arc<EpochOrder>>,
}

impl Feed {
    /// Starts `num_workers` workers (into `threads`), each allowed `prefetch` finished batches.
    fn spawn(
        plan: &Arc<Plan>,
        num_workers: usize,
        prefetch: usize,
        cancel: &Arc<AtomicBool>,
        threads: &mut Threads,
    ) -> Result<Self, DataError> {
        let mut workers = Vec::with_capacity(num_workers);
        for first in 0..num_workers {
            let (jobs, job_queue) = mpsc::channel();
            let (batch_queue, batches) = mpsc::sync_channel(prefetch);
            let (plan, cancel) = (Arc::clone(plan), Arc::clone(cancel));
            threads.spawn(format!("quench-load-{first}"), move || {
                work(&plan, first, num_workers, &job_queue, &batch_queue, &cancel);
            })?;
            workers.push(WorkerLink {
                jobs,
                batches,
                ended: true,
            });
        }
        Ok(Self {
            plan: Arc::clone(plan),
            workers,
            order: None,
        })
    }

    /// Begins an epoch in `order`.
    fn start(&mut self, order: Arc<EpochOrder>) {
        for worker in &mut self.workers {
            // A worker that is gone shows up as a closed queue in `next`.
            worker.ended = worker.jobs.send(Arc::clone(&order)).is_err();
        }
        self.order = Some(order);
    }

    /// Batch `k`; `None` when the epoch was cancelled or a worker is gone. Batches must be
    /// asked for in order.
    fn next(&mut self, k: usize) -> Option<HostBatch> {
        let order = self.order.as_ref()?;
        if self.workers.is_empty() {
            return Some(self.plan.assemble(order, k));
        }
        let count = self.workers.len();
        let worker = &mut self.workers[k % count];
        match worker.batches.recv() {
            Ok(Msg::Batch(batch)) => Some(batch),
            Ok(Msg::End) | Err(_) => {
                worker.ended = true;
                None
            }
        }
    }

    /// Discards what the workers still queue for this epoch, so the next one starts clean.
    fn drain(&mut self) {
        for worker in &mut self.workers {
            while !worker.ended {
                worker.ended = !matches!(worker.batches.recv(), Ok(Msg::Batch(_)));
            }
        }
        self.order = None;
    }
}

/// A worker's life: for each epoch it is sent, assemble every `stride`-th batch from
/// `first`, until the epoch ends or is cancelled.
fn work(
    plan: &Plan,
    first: usize,
    stride: usize,
    jobs: &Receiver<Arc<EpochOrder>>,
    batches: &SyncSender<Msg<HostBatch>>,
    cancel: &AtomicBool,
) {
    while let Ok(order) = jobs.recv() {
        for k in (first..plan.batches()).step_by(stride) {
            if cancel.load(Ordering::Acquire) {
                break;
            }
            if batches.send(Msg::Batch(plan.assemble(&order, k))).is_err() {
                return;
            }
        }
        if batches.send(Msg::End).is_err() {
            return;
        }
    }
}

/// The staging thread's life: for each epoch, copy the feed's batches, in order, into the
/// backend's page-locked memory (`Backend::staging`), so that the caller's upload is an
/// asynchronous transfer. The upload itself stays with the caller: a tensor made on this thread
/// belongs to its own stream on a CubeCL backend, and one freed on the caller's thread could be
/// reused here under the caller's pending reads. Uploading here, the loader's `staging` mode
/// served one batch's labels with another's features now and then (test accuracy 0.5000 on
/// the H200 while other processes shared it; a batch mismatch in `verify` on lavapipe, 1 run
/// in 4).
fn stage<B: Backend>(
    mut feed: Feed,
    device: &B::Device,
    jobs: &Receiver<Arc<EpochOrder>>,
    batches: &SyncSender<Msg<HostBatch>>,
    cancel: &AtomicBool,
) {
    while let Ok(order) = jobs.recv() {
        feed.start(order);
        for k in 0..feed.plan.batches() {
            if cancel.load(Ordering::Acquire) {
                break;
            }
            let Some(mut host) = feed.next(k) else { break };
            B::staging([&mut host.features, &mut host.labels].into_iter(), device);
            if batches.send(Msg::Batch(host)).is_err() {
                return;
            }
        }
        feed.drain();
        if batches.send(Msg::End).is_err() {
            return;
        }
    }
}

/// Where the caller takes its host batches from.
enum Stage {
    /// Its own feed.
    Direct(Feed),
    /// The staging thread, fed epochs through `jobs`.
    Staged {
        jobs: Sender<Arc<EpochOrder>>,
        batches: Receiver<Msg<HostBatch>>,
    },
}

/// The threads and queues of a streaming loader; they live as long as the loader.
pub(crate) struct Pipeline<B: Backend> {
    device: B::Device,
    /// Set while an epoch is abandoned, so the threads stop assembling it.
    cancel: Arc<AtomicBool>,
    /// Whether an epoch was started and not finished (its iterator may have been leaked).
    in_flight: bool,
    stage: Stage,
    /// Held only to be dropped, after `stage` (declaration order): the queues close first,
    /// which lets every thread return before it is joined.
    _threads: Threads,
}

/// The most loader workers: beyond a few per core they only contend, and a thread each past
/// the system's limit fails to start with an error that names no setting.
pub const MAX_WORKERS: usize = 256;

impl<B: Backend> Pipeline<B> {
    /// Starts `num_workers` workers (at most [`MAX_WORKERS`]) and, with `staging`, the
    /// staging thread.
    pub fn spawn(
        plan: &Arc<Plan>,
        device: &B::Device,
        num_workers: usize,
        prefetch: usize,
        staging: bool,
    ) -> Result<Self, DataError> {
        if num_workers > MAX_WORKERS {
            return Err(DataError::invalid(
                "num_workers",
                num_workers,
                "must be at most 256 (MAX_WORKERS; a few per core is where loading stops gaining)",
            ));
        }
        let mut threads = Threads::default();
        let cancel = Arc::new(AtomicBool::new(false));
        let feed = Feed::spawn(plan, num_workers, prefetch, &cancel, &mut threads)?;
        let stage = if staging {
            let (jobs, job_queue) = mpsc::channel();
            let (batch_queue, batches) = mpsc::sync_channel(prefetch);
            let (device, cancel) = (device.clone(), Arc::clone(&cancel));
            threads.spawn("quench-stage".to_owned(), move || {
                stage::<B>(feed, &device, &job_queue, &batch_queue, &cancel);
            })?;
            Stage::Staged { jobs, batches }
        } else {
            Stage::Direct(feed)
        };
        Ok(Self {
            device: device.clone(),
            cancel,
            in_flight: false,
            stage,
            _threads: threads,
        })
    }

    /// Begins an epoch in `order`.
    pub fn start(&mut self, order: EpochOrder) {
        if self.in_flight {
            self.finish(true);
        }
        self.in_flight = true;
        let order = Arc::new(order);
        match &mut self.stage {
            Stage::Direct(feed) => feed.start(order),
            // A staging thread that is gone shows up as a closed queue in `next`.
            Stage::Staged { jobs, .. } => drop(jobs.send(order)),
        }
    }

    /// Batch `k` of the current epoch, on the device; batches must be asked for in order.
    ///
    /// Panics if a loader thread has died, which only a panic inside it (already printed)
    /// can cause.
    pub fn next(&mut self, k: usize) -> Batch<B> {
        let host = match &mut self.stage {
            Stage::Direct(feed) => feed.next(k),
            Stage::Staged { batches, .. } => match batches.recv() {
                Ok(Msg::Batch(host)) => Some(host),
                Ok(Msg::End) | Err(_) => None,
            },
        };
        let host = host
            .unwrap_or_else(|| panic!("a loader thread stopped before batch {k}; see its panic"));
        upload(host, &self.device)
    }

    /// Ends the current epoch; when it is `abandoned` part-way, the threads stop assembling it
    /// and what they queued is discarded.
    pub fn finish(&mut self, abandoned: bool) {
        if abandoned {
            self.cancel.store(true, Ordering::Release);
        }
        match &mut self.stage {
            Stage::Direct(feed) => feed.drain(),
            Stage::Staged { batches, .. } => while let Ok(Msg::Batch(_)) = batches.recv() {},
        }
        self.cancel.store(false, Ordering::Release);
        self.in_flight = false;
    }
}
