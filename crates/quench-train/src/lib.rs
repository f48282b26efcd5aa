//! quench-train: filled by its issue.
