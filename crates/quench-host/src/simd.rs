//! Host kernels compiled three times: for the baseline x86-64 vector width, for AVX2 and for
//! AVX-512, chosen at run time. Every build runs the same operations in the same order (Rust
//! never contracts a multiply and an add into a fused multiply-add), so they give the same
//! bits; the wider builds only have more lanes.

/// Defines `fn $name(args) [-> ret]` that calls `$portable(args)` compiled with AVX-512 (F and
/// VL) or AVX2 enabled where the CPU has them, and as it is elsewhere. `$portable` should be
/// `#[inline(always)]` so that its body is compiled into each build, and so should whatever it
/// calls in a hot loop (a closure or a method not inlined runs at the baseline width).
#[macro_export]
macro_rules! simd_dispatch {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $portable:path) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2")]
                fn widest($($arg: $ty),*) $(-> $ret)? {
                    $portable($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                fn wide($($arg: $ty),*) $(-> $ret)? {
                    $portable($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: the CPU was just checked to have AVX-512 F and VL (and so AVX2).
                    return unsafe { widest($($arg),*) };
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
