//! Which members a rank takes.

/// Rank `rank` of `ranks` processes.
///
/// The shard is static and documented so that a member's rank is known before the run: member
/// `i` of a list goes to rank `i % ranks` (round-robin). Lists that are ordered longest member
/// first (the SGLD grid orders its chains by epochs) are so spread evenly over the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This process's rank, `0..ranks`.
    pub rank: usize,
    /// Processes in the run, at least 1.
    pub ranks: usize,
}

impl Shard {
    /// The whole run in one process.
    pub const ALONE: Self = Self { rank: 0, ranks: 1 };

    /// Indices, among `members`, of the members this rank takes: `rank, rank + ranks, ...`.
    pub fn members(&self, members: usize) -> Vec<usize> {
        (self.rank..members).step_by(self.ranks.max(1)).collect()
    }

    /// This rank's contiguous block of a list of `per_rank * ranks` members (the meta-learning
    /// batch: rank `r` adapts tasks `r * per_rank .. (r + 1) * per_rank`).
    pub fn block(&self, per_rank: usize) -> std::ops::Range<usize> {
        self.rank * per_rank..(self.rank + 1) * per_rank
    }

    /// Whether this is the rank that gathers and writes.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_goes_to_exactly_one_rank() {
        for ranks in 1..5 {
            for members in 0..11 {
                let mut seen: Vec<usize> = (0..ranks)
                    .flat_map(|rank| Shard { rank, ranks }.members(members))
                    .collect();
                seen.sort_unstable();
                assert_eq!(seen, (0..members).collect::<Vec<_>>(), "{ranks} ranks");
            }
        }
        assert_eq!(Shard { rank: 1, ranks: 3 }.members(8), [1, 4, 7]);
        assert_eq!(Shard { rank: 2, ranks: 3 }.block(16), 32..48);
        assert_eq!(Shard::ALONE.members(3), [0, 1, 2]);
    }
}
