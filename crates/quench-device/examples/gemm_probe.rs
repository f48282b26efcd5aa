use quench_device::host_gemm::{MatRef, gemm_strided};
use std::time::Instant;
fn main() {
    let (n, h, seq) = (256usize, 128usize, 20usize);
    let g = 4 * h;
    let w = vec![0.01f32; h * g];
    for strided in [false, true, false, true] {
        let mut gates = vec![0.0f32; n * seq * g];
        let hidden = vec![0.5f32; n * seq * h];
        let reps = 2000;
        let t0 = Instant::now();
        for r in 0..reps {
            let t = r % seq;
            if strided {
                gemm_strided(
                    &mut gates[t * g..],
                    seq * g,
                    MatRef::strided(&hidden[t * h..], n, h, seq * h),
                    MatRef::row_major(&w, h, g),
                    true,
                );
            } else {
                gemm_strided(
                    &mut gates[t * n * g..],
                    g,
                    MatRef::row_major(&hidden[t * n * h..], n, h),
                    MatRef::row_major(&w, h, g),
                    true,
                );
            }
        }
        let s = t0.elapsed().as_secs_f64() / reps as f64;
        println!(
            "strided {strided}: {:.1} us, {:.1} GFLOP/s",
            s * 1e6,
            2.0 * (n * h * g) as f64 / s / 1e9
        );
        // backward: dh [n,h] += dz[after] [n,g] @ W_h^T
        let dz = vec![0.1f32; n * seq * g];
        let mut dh = vec![0f32; n * h];
        let t0 = Instant::now();
        for r in 0..reps {
            let t = r % seq;
            if strided {
                gemm_strided(
                    &mut dh,
                    h,
                    MatRef::strided(&dz[t * g..], n, g, seq * g),
                    MatRef::row_major(&w, h, g).t(),
                    true,
                );
            } else {
                gemm_strided(
                    &mut dh,
                    h,
                    MatRef::row_major(&dz[t * n * g..], n, g),
                    MatRef::row_major(&w, h, g).t(),
                    true,
                );
            }
        }
        let s = t0.elapsed().as_secs_f64() / reps as f64;
        println!(
            "  backward dh strided {strided}: {:.1} us, {:.1} GFLOP/s",
            s * 1e6,
            2.0 * (n * h * g) as f64 / s / 1e9
        );
    }
}
