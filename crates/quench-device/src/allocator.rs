//! The host allocator's policy for large buffers.
//!
//! glibc serves a block above its mmap threshold (128 KiB at start, raised only as such blocks
//! are freed) with a fresh mapping, and hands the top of its heap back to the system once more
//! than its trim threshold is free. A training step on the CPU backend allocates and frees
//! tensors of megabytes every step, so each step pays page faults, zeroing and TLB shootdowns
//! for memory it has just given back: about 30 % of the qRNG GAN tournament's time.
//! [`keep_freed_memory`] raises both thresholds so that freed buffers are reused.

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

#[cfg(test)]
mod tests {
    use super::*;

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
