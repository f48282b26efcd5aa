//! Recycled host buffers: the large `f32` buffers a host kernel writes in full (an LSTM's tape
//! and the scratch of its backward pass, dense, normalisation and attention outputs and
//! gradients, dropout masks) come from one process-wide pool, and the kernels that know a
//! buffer is done with give it back (the backward passes of the LSTM, attention, dense and
//! normalisation kernels: their tapes, inputs and output gradients, where nothing else holds
//! them), so that a training step reuses what the step before it had. A tensor that Burn drops
//! is not given back: its buffer goes to the allocator as before.
//!
//! Why: a fresh buffer costs its zeroing or its page faults. glibc's `calloc` clears a reused
//! block with `memset` on the calling thread (a batch-512 LSTM layer's gates are 42 MB), and a
//! block above the mmap threshold arrives as fresh pages that fault one by one; the LSTM's
//! epoch spent about a tenth of its time there (docs/benchmarks.md, issue 33). A recycled
//! buffer holds whatever its last user left in it: [`take`] is for buffers whose every value
//! is written before it is read, which each caller's comment shows.
//!
//! The pool keeps at most [`KEPT_BYTES`] (oldest given back dropped first) and only buffers of
//! [`POOLED_FROM`] values or more: small ones are cheap to allocate.

use std::collections::VecDeque;
use std::sync::Mutex;

use burn::tensor::ops::FloatTensor;
use burn_ndarray::NdArrayTensor;

use crate::tensor::Host;

/// Buffers shorter than this (256 KiB of `f32`) are not kept.
pub const POOLED_FROM: usize = 1 << 16;

/// The most the pool holds: 512 MiB, about two batch-512 LSTM training steps of the temporal
/// workload (tapes, gradients' scratch) at two sizes (the full batches and the last one).
pub const KEPT_BYTES: usize = 512 << 20;

/// Kept buffers, oldest first, with their bytes and the most they may hold.
struct Pool {
    buffers: VecDeque<Vec<f32>>,
    bytes: usize,
    bound: usize,
}

impl Pool {
    const fn new(bound: usize) -> Self {
        Self {
            buffers: VecDeque::new(),
            bytes: 0,
            bound,
        }
    }

    /// The newest kept buffer of `len` values, if any.
    fn take(&mut self, len: usize) -> Option<Vec<f32>> {
        let found = self.buffers.iter().rposition(|b| b.len() == len)?;
        let buffer = self.buffers.remove(found)?;
        self.bytes -= bytes_of(&buffer);
        Some(buffer)
    }

    /// Keeps `buffer`, dropping the oldest ones as the bound needs; one larger than the bound
    /// is dropped.
    fn keep(&mut self, buffer: Vec<f32>) {
        let bytes = bytes_of(&buffer);
        if bytes > self.bound {
            return;
        }
        while self.bytes + bytes > self.bound {
            match self.buffers.pop_front() {
                Some(old) => self.bytes -= bytes_of(&old),
                None => break,
            }
        }
        self.bytes += bytes;
        self.buffers.push_back(buffer);
    }

    /// Drops every kept buffer.
    fn clear(&mut self) {
        self.buffers.clear();
        self.bytes = 0;
    }
}

static POOL: Mutex<Pool> = Mutex::new(Pool::new(KEPT_BYTES));

/// The pool under its lock. A panic while it was held cannot leave it inconsistent (every
/// change is one push or removal with its byte count), so a poisoned lock is taken as it is.
fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn bytes_of(buffer: &Vec<f32>) -> usize {
    buffer.capacity() * size_of::<f32>()
}

/// A buffer of `len` values whose contents are unspecified (a recycled buffer's old values, or
/// zeros): for a caller that writes every value before reading it. In this crate's tests every
/// value is NaN, so that a value read before it is written shows.
pub fn take(len: usize) -> Vec<f32> {
    let recycled = (len >= POOLED_FROM).then(|| pool().take(len)).flatten();
    let buffer = recycled.unwrap_or_else(|| vec![0.0; len]);
    #[cfg(test)]
    let buffer = {
        let mut buffer = buffer;
        buffer.fill(f32::NAN);
        buffer
    };
    buffer
}

/// Gives `buffer` back for a later [`take`] of its length (kept only from [`POOLED_FROM`]
/// values on, and only when it has no spare capacity).
pub fn recycle(buffer: Vec<f32>) {
    if buffer.len() >= POOLED_FROM && buffer.len() == buffer.capacity() {
        pool().keep(buffer);
    }
}

/// Whether the pool holds the buffer that starts at `address` (for the tests of the kernels
/// that recycle).
pub fn holds(address: *const f32) -> bool {
    pool().buffers.iter().any(|b| b.as_ptr() == address)
}

/// Whether the pool holds a buffer of `len` values (tests: that a buffer still held elsewhere
/// was not given back, not even as a copy).
pub fn holds_length(len: usize) -> bool {
    pool().buffers.iter().any(|b| b.len() == len)
}

/// Where the buffer of `t` (a CPU f32 tensor, contiguous) starts, for [`holds`].
pub fn address_of<const D: usize>(t: &burn::tensor::Tensor<Host, D>) -> *const f32 {
    crate::tensor::values(&t.clone().into_primitive().tensor()).as_ptr()
}

/// Drops every kept buffer (`quench_device::memory::release_host_buffers`).
pub fn release() {
    pool().clear();
}

/// Gives `t`'s buffer back where `t` is its only owner, holds `f32` values in row-major order
/// from the buffer's start and spans all of it; otherwise only drops `t` (whoever else holds
/// the buffer keeps it).
pub fn recycle_tensor(t: FloatTensor<Host>) {
    // A borrowed storage (a zero-copy load) is never unique.
    let NdArrayTensor::F32(storage) = t else {
        return;
    };
    if !storage.is_unique() {
        return;
    }
    let array = storage.into_owned();
    if !array.is_standard_layout() {
        return;
    }
    let len = array.len();
    let (values, offset) = array.into_owned().into_raw_vec_and_offset();
    if offset.unwrap_or(0) == 0 && values.len() == len {
        recycle(values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::tensor;

    #[test]
    fn a_buffer_kept_is_the_next_one_taken_of_its_length_and_the_bound_holds() {
        let mut pool = Pool::new(10 * size_of::<f32>());
        let buffer = vec![1.0; 4];
        let address = buffer.as_ptr();
        pool.keep(buffer);
        assert!(pool.take(3).is_none());
        assert_eq!(pool.take(4).map(|b| b.as_ptr()), Some(address));
        assert!(pool.take(4).is_none());
        // 4 + 4 fit in 10 values; a third pushes the oldest out; 11 are never kept.
        for fill in [1.0, 2.0, 3.0] {
            pool.keep(vec![fill; 4]);
        }
        assert_eq!((pool.buffers.len(), pool.bytes), (2, 8 * size_of::<f32>()));
        assert_eq!(pool.take(4).map(|b| b[0]), Some(3.0), "the newest first");
        assert_eq!(pool.take(4).map(|b| b[0]), Some(2.0));
        pool.keep(vec![0.0; 11]);
        assert!(pool.buffers.is_empty());
        assert_eq!(pool.bytes, 0);
        pool.keep(vec![5.0; 4]);
        pool.clear();
        assert!(pool.take(4).is_none());
        assert_eq!(pool.bytes, 0);
    }

    /// The process-wide pool: each test uses lengths of its own (tests run in parallel).
    #[test]
    fn the_shared_pool_takes_back_only_what_nobody_else_holds() {
        let len = POOLED_FROM + 1_001;
        recycle(vec![1.0; POOLED_FROM - 1]);
        assert!(pool().take(POOLED_FROM - 1).is_none(), "too small to keep");
        let mut spare = Vec::with_capacity(len + 1);
        spare.resize(len, 0.0);
        recycle(spare);
        assert!(pool().take(len).is_none(), "spare capacity: not kept");

        let t = tensor(vec![2.0; len], [len]);
        let address = crate::tensor::values(&t).as_ptr();
        let other = t.clone();
        recycle_tensor(t);
        assert!(
            pool().take(len).is_none(),
            "shared: stays with its other owner"
        );
        recycle_tensor(other);
        let again = take(len);
        assert_eq!(again.as_ptr(), address, "its last owner gives it back");
        // Tests see NaN in every taken buffer.
        assert!(again.iter().all(|v| v.is_nan()));
    }
}
