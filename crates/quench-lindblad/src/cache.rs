//! The operator cache: each system's generators are built and uploaded once per device.
//!
//! This is the "simulator caching" of guide 001 at the level where it pays: the original
//! rebuilt its operators and simulator on every loss call; here the `[d^4, 1 + C + K]`
//! generator stack is the only per-system state, and everything per task is a tensor.

use quench_kernels::QuenchOps;
use std::collections::HashMap;

use burn::tensor::backend::{DeviceId, DeviceOps};
use serde::Serialize;

use crate::{Generators, System};

/// What the cache has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Look-ups answered from the cache.
    pub hits: u64,
    /// Look-ups that built and uploaded generators.
    pub misses: u64,
    /// Device memory held by the cached generators, in bytes.
    pub bytes: usize,
    /// Systems (times devices) held.
    pub entries: usize,
}

/// Generators by system and device, for one backend type `B`.
#[derive(Debug)]
pub struct OperatorCache<B: QuenchOps> {
    entries: HashMap<(u64, DeviceId), (System, Generators<B>)>,
    stats: CacheStats,
}

impl<B: QuenchOps> Default for OperatorCache<B> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            stats: CacheStats::default(),
        }
    }
}

impl<B: QuenchOps> OperatorCache<B> {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The generators of `system` on `device`, uploaded on the first request only.
    pub fn generators(&mut self, system: &System, device: &B::Device) -> Generators<B> {
        let key = (system.key(), device.id());
        if let Some((cached, generators)) = self.entries.get(&key) {
            // The key is a hash; comparing the operators rules out a collision.
            if cached == system {
                self.stats.hits += 1;
                return generators.clone();
            }
        }
        let generators = Generators::upload(system, device);
        tracing::debug!(
            dim = system.dim(),
            bytes = generators.bytes(),
            "uploading Lindblad generators"
        );
        self.stats.misses += 1;
        if let Some((_, replaced)) = self
            .entries
            .insert(key, (system.clone(), generators.clone()))
        {
            self.stats.bytes -= replaced.bytes();
        }
        self.stats.bytes += generators.bytes();
        self.stats.entries = self.entries.len();
        generators
    }

    /// Hits, misses and bytes so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Drops every entry, keeping the hit and miss counts.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.stats.bytes = 0;
        self.stats.entries = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets;
    use burn::backend::NdArray;

    #[test]
    fn second_request_is_a_hit_and_bytes_count_each_system_once() {
        let device = Default::default();
        let mut cache = OperatorCache::<NdArray<f32>>::new();
        let one = presets::one_qubit();
        cache.generators(&one, &device);
        cache.generators(&one, &device);
        cache.generators(&presets::two_qubit(), &device);
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (1, 2, 2));
        // 4^2 x (1 + 2 + 3) and 16^2 x (1 + 4 + 4) f32 values.
        assert_eq!(stats.bytes, 4 * (16 * 6 + 256 * 9));
        cache.clear();
        assert_eq!(cache.stats().bytes, 0);
        cache.generators(&one, &device);
        assert_eq!(cache.stats().misses, 3);
    }
}
