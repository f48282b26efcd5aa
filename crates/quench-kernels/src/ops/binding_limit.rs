//! A narrower binding limit for CubeCL launches, set by a test: so that a test on a device
//! that binds many tensors a launch takes the path of one that binds few (wgpu on Metal binds
//! about 30). Test builds only.

thread_local! {
    /// The tensors a CubeCL launch may bind on this thread, where a test narrowed it.
    static BINDING_LIMIT: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with every CubeCL launch made on this thread binding at most `limit` tensors
/// (`None`: what the device allows).
pub(crate) fn with_binding_limit<T>(limit: Option<u32>, f: impl FnOnce() -> T) -> T {
    let before = BINDING_LIMIT.replace(limit);
    let out = f();
    BINDING_LIMIT.set(before);
    out
}

/// The limit [`with_binding_limit`] set on this thread.
#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) fn binding_limit() -> Option<u32> {
    BINDING_LIMIT.get()
}
