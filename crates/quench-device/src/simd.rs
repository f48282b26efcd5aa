//! Host kernels compiled twice: for the baseline x86-64 vector width and for AVX2, chosen at
//! run time. Both builds run the same operations in the same order (Rust never contracts a
//! multiply and an add into a fused multiply-add), so they give the same bits; AVX2 only
//! doubles the lanes.

/// Defines `fn $name(args)` that calls `$portable(args)` compiled with AVX2 enabled where the
/// CPU has it, and as it is elsewhere. `$portable` should be `#[inline(always)]` so that its
/// body is compiled into each build.
#[macro_export]
macro_rules! avx2_dispatch {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $portable:path) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                fn wide($($arg: $ty),*) {
                    $portable($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU was just checked to have AVX2.
                    return unsafe { wide($($arg),*) };
                }
            }
            $portable($($arg),*)
        }
    };
}
