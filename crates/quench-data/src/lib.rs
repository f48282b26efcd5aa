//! quench-data: filled by its issue.
