//! quench-lindblad: filled by its issue.
