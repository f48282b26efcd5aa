//! The host allocator's policy for large buffers.
//!
//! glibc serves a block above its mmap threshold (128 KiB at start, raised only as such blocks
//! are freed) with a fresh mapping, and hands the top of its heap back to the system once more
//! than its trim threshold is free. A training step on the CPU backend allocates and frees
//! tensors of megabytes every step, so each step pays page faults, zeroing and TLB shootdowns
//! for memory it has just given back: about 30 % of the qRNG GAN tournament's time.
//! [`keep_freed_memory`] raises both thresholds so that freed buffers are reused.
//!
//! [`CountingVectorAligned`] is the same allocator counting the blocks it hands out, for the
//! programs that measure allocations per step ([`counting_allocator!`], [`Allocations`]).
//!
//! [`VectorAligned`] starts every buffer of 128 bytes or more on a 64-byte boundary, so that
//! results do not depend on where a buffer happens to land (see its documentation). A library
//! does not choose a program's allocator: each of Quench's programs (the `benchmark` binary,
//! the examples, the benches and the test binaries) names it with [`aligned_allocator!`], and a
//! program of a library user that wants CPU runs to repeat bit for bit does the same.
//!
//! [`aligned_allocator!`]: crate::aligned_allocator
//! [`counting_allocator!`]: crate::counting_allocator

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The mmap threshold set: glibc's largest (32 MiB on 64-bit targets).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 32 << 20;

/// Makes glibc keep and reuse freed blocks of up to 32 MiB instead of mapping and unmapping
/// them each time, and never trim the heap below 2 GiB of free space. The process's resident
/// memory then stays near its peak for the rest of its life: meant for compute runs, called at
/// the start of Quench's binaries. Does nothing where glibc is not the allocator, or when the
/// user has set `MALLOC_MMAP_THRESHOLD_` or `MALLOC_TRIM_THRESHOLD_` (their choice stands).
/// Returns whether the policy was applied.
pub fn keep_freed_memory() -> bool {
    let user_chose = ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
        .iter()
        .any(|name| std::env::var_os(name).is_some());
    if user_chose {
        return false;
    }
    apply()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn apply() -> bool {
    // SAFETY: mallopt only changes the allocator's tuning parameters, under its own lock; it
    // is sound to call at any time from any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn apply() -> bool {
    false
}

/// Alignment of large blocks: AVX-512's vector and a cache line.
pub const VECTOR_ALIGN: usize = 64;

/// Blocks from this size on are [`VECTOR_ALIGN`]-aligned: 32 `f32`, the length from which
/// burn-ndarray's SIMD kernels take over.
pub const ALIGNED_FROM: usize = 128;

/// The system allocator, with every block of [`ALIGNED_FROM`] bytes or more starting on a
/// [`VECTOR_ALIGN`]-byte boundary: the global allocator of every Quench program
/// ([`aligned_allocator!`]).
///
/// Why: burn-ndarray 0.21's SIMD `recip` (the forward `Tensor::recip`, and the backward pass
/// of every division and logarithm: cross-entropy, softmax, layer norm) works in place on a
/// buffer it owns by splitting it at vector boundaries: the aligned middle gets the CPU's
/// approximate reciprocal (`rcpps` on x86 with AVX2, relative error up to 3.7e-4; see
/// `quench_kernels::testing::RECIP_ESTIMATE_BOUND` for the others; macerator 0.3 has no refinement
/// step, added in its 0.4), the unaligned ends an exact division. Which elements
/// are which then depends on the buffer's address, which depends on the order of earlier
/// frees, some of which follow Burn's autodiff graph's hash maps, whose order changes from
/// process to process: the same seed gave different gradients in different runs (issue 19).
/// With every buffer aligned, the split depends only on the tensor's shape and offset, and a
/// run repeats bit for bit. (Intel's MKL asks for 64-byte-aligned memory for its
/// reproducible mode for the same reason.)
///
/// How: such a block is a `malloc` of [`VECTOR_ALIGN`] bytes more, of which the first
/// boundary past its start is handed out, with the start written just below it. `malloc` keeps
/// its thread caches and its in-place `realloc` (glibc's `posix_memalign` has neither: it took
/// 50-160 ns a block against malloc's 9-16 ns here); a block costs 64 bytes more.
///
/// [`aligned_allocator!`]: crate::aligned_allocator
pub struct VectorAligned;

/// Makes [`VectorAligned`] the global allocator of the program whose crate root invokes it:
/// `quench_support::aligned_allocator!();` in a binary's `main.rs`, or under `#[cfg(test)]` in a
/// library's `lib.rs` for its unit-test binary. A program has one global allocator; Rust refuses
/// to link two.
#[macro_export]
macro_rules! aligned_allocator {
    () => {
        #[global_allocator]
        static QUENCH_ALLOCATOR: $crate::allocator::VectorAligned =
            $crate::allocator::VectorAligned;
    };
}

/// Where a block's `malloc`ed start is kept: the word below the address handed out.
const HEADER: usize = std::mem::size_of::<usize>();

/// Whether blocks of `layout` are moved to a vector boundary.
fn widened(layout: Layout) -> bool {
    layout.size() >= ALIGNED_FROM && layout.align() < VECTOR_ALIGN
}

/// The `malloc` behind a widened block of `size` bytes; `None` past isize::MAX.
fn raw_layout(size: usize) -> Option<Layout> {
    let total = size.checked_add(VECTOR_ALIGN)?;
    Layout::from_size_align(total, HEADER).ok()
}

/// How far above `raw` its first vector boundary lies. `raw` is `malloc`ed (aligned to at
/// least [`HEADER`]), so this is in `HEADER..=VECTOR_ALIGN`: room for the header below the
/// boundary, and the block's [`VECTOR_ALIGN`] extra bytes cover it.
fn boundary(raw: *mut u8) -> usize {
    VECTOR_ALIGN - (raw as usize % VECTOR_ALIGN)
}

/// The boundary above `raw`, with `raw` written below it.
///
/// # Safety
/// `raw` is a live block of `raw_layout(size)` for the size in use.
unsafe fn place(raw: *mut u8) -> *mut u8 {
    // SAFETY: the boundary is inside the block ([`boundary`]); the header word lies between
    // `raw` and the boundary, aligned since both are multiples of HEADER.
    unsafe {
        let aligned = raw.add(boundary(raw));
        aligned.sub(HEADER).cast::<usize>().write(raw as usize);
        aligned
    }
}

/// The `malloc`ed start of a widened block handed out at `ptr`.
///
/// # Safety
/// `ptr` was returned by [`place`].
unsafe fn raw_of(ptr: *mut u8) -> *mut u8 {
    // SAFETY: `place` wrote the start in the word below `ptr`.
    unsafe { ptr.sub(HEADER).cast::<usize>().read() as *mut u8 }
}

// SAFETY: a widened block is a `System` block of `raw_layout(size)`, freed with that layout
// (the size comes from the caller's layout, the start from the header); a block handed out at a
// vector boundary satisfies the caller's smaller alignment. Other blocks go to `System` as
// they are.
unsafe impl GlobalAlloc for VectorAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !widened(layout) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { System.alloc(layout) };
        }
        let Some(raw_layout) = raw_layout(layout.size()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: a non-zero size; `place` stays within the block.
        unsafe {
            let raw = System.alloc(raw_layout);
            if raw.is_null() { raw } else { place(raw) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !widened(layout) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { System.alloc_zeroed(layout) };
        }
        let Some(raw_layout) = raw_layout(layout.size()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: as for `alloc`; the header lies below the zeroed bytes handed out.
        unsafe {
            let raw = System.alloc_zeroed(raw_layout);
            if raw.is_null() { raw } else { place(raw) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !widened(layout) {
            // SAFETY: `ptr` came from `System` with `layout`.
            return unsafe { System.dealloc(ptr, layout) };
        }
        if let Some(raw_layout) = raw_layout(layout.size()) {
            // SAFETY: a widened block was allocated as `raw_layout` at its header's start.
            unsafe { System.dealloc(raw_of(ptr), raw_layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees that `new_size`, rounded up to `layout.align()`, does
        // not overflow isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (widened(layout), widened(new_layout)) {
            // SAFETY: `ptr` came from `System` with `layout`.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) => {
                let (Some(old), Some(new)) = (raw_layout(layout.size()), raw_layout(new_size))
                else {
                    return std::ptr::null_mut();
                };
                // SAFETY: the block is `old` at `raw`; `realloc` keeps the bytes up to the
                // smaller size, at the same offset from the new start, and `copy` (memmove)
                // takes them to the new start's boundary, both ranges within the new block.
                unsafe {
                    let raw = raw_of(ptr);
                    let offset = ptr as usize - raw as usize;
                    let moved = System.realloc(raw, old, new.size());
                    if moved.is_null() {
                        return moved;
                    }
                    // The data sits at the old offset from the new start; the header goes in
                    // only once it is at the new boundary, since it may lie where the data was.
                    let kept = layout.size().min(new_size);
                    std::ptr::copy(moved.add(offset), moved.add(boundary(moved)), kept);
                    place(moved)
                }
            }
            // Crossing `ALIGNED_FROM`: a new block, the bytes copied, the old one freed.
            _ => unsafe {
                // SAFETY: a non-zero new size (the caller's contract); the copy stays within
                // both blocks; `ptr` is freed with its own layout.
                let moved = self.alloc(new_layout);
                if !moved.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                moved
            },
        }
    }
}

/// [`VectorAligned`], counting the blocks it hands out (every `alloc`, `alloc_zeroed` and
/// `realloc`) and their bytes ([`Allocations::now`]): the global allocator of the programs that
/// measure allocations per step ([`counting_allocator!`]). Each block costs two atomic adds on
/// counters every thread shares, so Quench's other programs do not count.
///
/// [`counting_allocator!`]: crate::counting_allocator
pub struct CountingVectorAligned;

/// Blocks handed out by [`CountingVectorAligned`] since the program started.
static BLOCKS: AtomicU64 = AtomicU64::new(0);
/// Their bytes.
static BYTES: AtomicU64 = AtomicU64::new(0);

/// Makes [`CountingVectorAligned`] the global allocator of the program whose crate root
/// invokes it (in place of [`aligned_allocator!`]).
///
/// [`aligned_allocator!`]: crate::aligned_allocator
#[macro_export]
macro_rules! counting_allocator {
    () => {
        #[global_allocator]
        static QUENCH_ALLOCATOR: $crate::allocator::CountingVectorAligned =
            $crate::allocator::CountingVectorAligned;
    };
}

/// Blocks handed out and their bytes (a `realloc` counts as a block of its new size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Allocations {
    /// Blocks.
    pub blocks: u64,
    /// Bytes, all blocks together.
    pub bytes: u64,
}

impl Allocations {
    /// The counts since the program started, where [`CountingVectorAligned`] is its
    /// allocator (zeros under any other).
    pub fn now() -> Self {
        Self {
            blocks: BLOCKS.load(Ordering::Relaxed),
            bytes: BYTES.load(Ordering::Relaxed),
        }
    }

    /// The blocks and bytes handed out between `earlier` and `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            blocks: self.blocks.saturating_sub(earlier.blocks),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// Counts one block of `size` bytes.
fn count(size: usize) {
    BLOCKS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(size as u64, Ordering::Relaxed);
}

// SAFETY: every call is passed on to `VectorAligned` with the caller's arguments; counting
// touches no memory of the blocks.
unsafe impl GlobalAlloc for CountingVectorAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { VectorAligned.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { VectorAligned.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { VectorAligned.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { VectorAligned.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills `size` bytes at `ptr` with a pattern that a shifted copy would not repeat.
    unsafe fn fill(ptr: *mut u8, size: usize) {
        for i in 0..size {
            // SAFETY: within the block.
            unsafe { ptr.add(i).write((i % 251) as u8) };
        }
    }

    /// Whether the first `size` bytes at `ptr` still hold [`fill`]'s pattern.
    unsafe fn holds(ptr: *mut u8, size: usize) -> bool {
        // SAFETY: within the block.
        (0..size).all(|i| unsafe { ptr.add(i).read() } == (i % 251) as u8)
    }

    fn aligned_as_promised(ptr: *mut u8, layout: Layout) -> bool {
        let wanted = if layout.size() >= ALIGNED_FROM {
            layout.align().max(VECTOR_ALIGN)
        } else {
            layout.align()
        };
        (ptr as usize).is_multiple_of(wanted)
    }

    #[test]
    fn large_blocks_start_on_vector_boundaries_and_keep_their_bytes_through_realloc() {
        let allocator = VectorAligned;
        for (size, align) in [
            (128, 4),
            (1000, 8),
            (4 << 20, 4),
            (127, 4),
            (8, 1),
            (256, 128),
        ] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero sizes; every block is freed with the layout it has.
            unsafe {
                let zeroed = allocator.alloc_zeroed(layout);
                assert!(aligned_as_promised(zeroed, layout), "{size} bytes");
                assert!((0..size).all(|i| *zeroed.add(i) == 0));
                allocator.dealloc(zeroed, layout);

                let mut ptr = allocator.alloc(layout);
                assert!(aligned_as_promised(ptr, layout), "{size} bytes");
                fill(ptr, size);
                // Grown step by step as a vector grows (within and across the threshold, the
                // block moving or not), then shrunk below the threshold.
                let mut current = layout;
                for factor in [2, 3, 5, 8] {
                    let grown = Layout::from_size_align(size * factor, align).unwrap();
                    ptr = allocator.realloc(ptr, current, grown.size());
                    assert!(aligned_as_promised(ptr, grown), "{size} x {factor}");
                    assert!(holds(ptr, size), "{size} x {factor}");
                    fill(ptr, grown.size());
                    current = grown;
                }
                let small = Layout::from_size_align(16, align).unwrap();
                ptr = allocator.realloc(ptr, current, small.size());
                assert!(holds(ptr, 16));
                allocator.dealloc(ptr, small);
            }
        }
    }

    #[test]
    fn vectors_of_every_size_keep_their_values() {
        // The global allocator of this test binary (the crate root names it): a vector grown
        // element by element from a few bytes to a megabyte crosses the threshold and moves
        // many times.
        let mut values: Vec<u32> = Vec::new();
        for i in 0..(1u32 << 18) {
            values.push(i.wrapping_mul(2_654_435_761));
            if i.is_power_of_two() {
                assert!(
                    values
                        .iter()
                        .enumerate()
                        .all(|(k, &v)| v == (k as u32).wrapping_mul(2_654_435_761))
                );
            }
        }
        let bytes = values.len() * 4;
        assert!(bytes < ALIGNED_FROM || (values.as_ptr() as usize).is_multiple_of(VECTOR_ALIGN));
    }

    #[test]
    fn the_counting_allocator_counts_each_block_and_its_bytes() {
        // Called directly: this test binary's global allocator does not count, so nothing
        // else moves the counters.
        let allocator = CountingVectorAligned;
        let before = Allocations::now();
        let [small, large] = [24, 3000].map(|size| Layout::from_size_align(size, 8).unwrap());
        // SAFETY: non-zero sizes; every block is freed with the layout it has.
        unsafe {
            let a = allocator.alloc(small);
            let b = allocator.alloc_zeroed(large);
            assert!(aligned_as_promised(b, large));
            let b = allocator.realloc(b, large, 5000);
            allocator.dealloc(a, small);
            allocator.dealloc(b, Layout::from_size_align(5000, 8).unwrap());
        }
        let counted = Allocations::now().since(before);
        assert_eq!(
            counted,
            Allocations {
                blocks: 3,
                bytes: 24 + 3000 + 5000
            }
        );
    }

    #[test]
    fn applies_on_glibc_and_memory_stays_usable() {
        let applied = keep_freed_memory();
        assert_eq!(applied, cfg!(all(target_os = "linux", target_env = "gnu")));
        // A block above the old threshold, freed and allocated again, keeps working.
        for round in 0..3u8 {
            let block = vec![round; 8 << 20];
            assert!(block.iter().all(|&b| b == round));
        }
    }
}
