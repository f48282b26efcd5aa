//! Exclusive use of the backend's seeded random generator.
//!
//! `Tensor::random` draws from the backend's generator, and burn-ndarray keeps one for the
//! whole process (a static behind a mutex) that `B::seed` replaces. Two runs that seed it and
//! draw at the same time from two threads (tests in one test binary, or a program training two
//! models at once) interleave their draws, and neither run can be repeated from its seed. A run
//! whose draws must follow its seed holds a [`SeededGenerator`] for as long as it draws:
//! acquiring one waits until no other thread holds one, then seeds the generator.
//!
//! One thread may hold several at once (a run inside a run): the inner one re-seeds, and the
//! outer run's later draws continue from the inner seed's stream, which is still the same on
//! every repetition. A guard belongs to the thread that acquired it (it is not `Send`), so a
//! hold can never be split between threads.

use std::marker::PhantomData;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};

use burn::tensor::backend::Backend;

/// Who holds the generator, and how many guards that thread has.
struct Holder {
    owner: Option<ThreadId>,
    guards: usize,
}

static HOLDER: Mutex<Holder> = Mutex::new(Holder {
    owner: None,
    guards: 0,
});
static RELEASED: Condvar = Condvar::new();

/// A panic while the lock was held (a failing test) leaves `Holder` consistent: every change
/// to it is a single assignment, so a poisoned lock is taken as it is.
fn holder() -> MutexGuard<'static, Holder> {
    HOLDER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The right to draw from the backend's generator without other threads' draws in between,
/// from the seed given to [`SeededGenerator::acquire`], until this guard and its clones drop.
#[derive(Debug)]
pub struct SeededGenerator {
    /// Not `Send`: the hold is counted for the acquiring thread, and released by it.
    _held: PhantomData<*const ()>,
}

impl SeededGenerator {
    /// Waits until no other thread holds the generator, then seeds it with `seed` on `device`.
    pub fn acquire<B: Backend>(device: &B::Device, seed: u64) -> Self {
        let guard = Self::enter();
        B::seed(device, seed);
        guard
    }

    fn enter() -> Self {
        let me = thread::current().id();
        let mut holder = holder();
        while holder.owner.is_some_and(|owner| owner != me) {
            holder = RELEASED
                .wait(holder)
                .unwrap_or_else(PoisonError::into_inner);
        }
        holder.owner = Some(me);
        holder.guards += 1;
        Self { _held: PhantomData }
    }
}

/// A clone extends the same hold (no new seed): the draws go on from where they are.
impl Clone for SeededGenerator {
    fn clone(&self) -> Self {
        holder().guards += 1;
        Self { _held: PhantomData }
    }
}

impl Drop for SeededGenerator {
    fn drop(&mut self) {
        let mut holder = holder();
        holder.guards = holder.guards.saturating_sub(1);
        if holder.guards == 0 {
            holder.owner = None;
            RELEASED.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::{Distribution, Tensor};

    type Cpu = NdArray<f32>;

    /// `rounds` draws of 8 normals, yielding between draws so that another thread's draws
    /// would land in between if nothing kept them out.
    fn stream(seed: u64, rounds: usize) -> Vec<f32> {
        let device = Default::default();
        let _generator = SeededGenerator::acquire::<Cpu>(&device, seed);
        let mut values = Vec::new();
        for _ in 0..rounds {
            let draw = Tensor::<Cpu, 1>::random([8], Distribution::Normal(0.0, 1.0), &device);
            values.extend(draw.into_data().to_vec::<f32>().unwrap());
            thread::yield_now();
            thread::sleep(std::time::Duration::from_micros(200));
        }
        values
    }

    #[test]
    fn concurrent_runs_each_get_their_own_seeded_stream() {
        let alone: Vec<Vec<f32>> = (0..4).map(|seed| stream(seed, 20)).collect();
        let together: Vec<Vec<f32>> = thread::scope(|s| {
            let runs: Vec<_> = (0..4)
                .map(|seed| s.spawn(move || stream(seed, 20)))
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert_eq!(together, alone);
        assert_ne!(alone[0], alone[1], "different seeds give different streams");
    }

    #[test]
    fn one_thread_may_hold_it_twice_and_a_clone_keeps_the_hold() {
        let device = Default::default();
        let outer = SeededGenerator::acquire::<Cpu>(&device, 1);
        let inner = SeededGenerator::acquire::<Cpu>(&device, 2);
        let copy = inner.clone();
        drop(inner);
        drop(outer);
        {
            let held = holder();
            assert_eq!((held.owner, held.guards), (Some(thread::current().id()), 1));
        }
        drop(copy);
        // Another thread can take it now; it would wait for ever if the hold had leaked.
        thread::spawn(|| drop(SeededGenerator::acquire::<Cpu>(&Default::default(), 3)))
            .join()
            .unwrap();
    }
}
