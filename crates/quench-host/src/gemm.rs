//! The host kernels' matrix product: the `gemm` crate's f32 kernels (AVX-512 where the CPU has
//! it, AVX2 + FMA or SSE otherwise, chosen at run time), on one thread. Quench's kernels split
//! work over cores themselves (rows of members x directions over lanes), so each product runs
//! where its operands were made.
//!
//! Why not burn-ndarray's `matrixmultiply`: its kernels stop at AVX2. On the 2-core AVX-512
//! development VM, one thread, `gemm` reaches about 250 GFLOP/s on the LSTM's shapes (a step's
//! `[256, 128] @ [128, 512]`, the projection's `[5120, 256] @ [256, 512]`) against 190-220 for
//! `matrixmultiply` on the shapes it does not parallelise; `benchmark doctor` measures it.

/// One past the last element of `rows` rows of `cols` values `row_stride` apart (`rows` at
/// least 1), or `None` where that overflows: the bounds checks must not wrap.
fn last_end(rows: usize, row_stride: usize, cols: usize) -> Option<usize> {
    (rows - 1).checked_mul(row_stride)?.checked_add(cols)
}

/// A read-only `rows x cols` f32 matrix in `data`: element `(r, c)` at `r * row_stride + c *
/// col_stride`. A transpose is the same data with the strides swapped.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// `data` as a row-major `rows x cols` matrix. Panics if `data` is shorter than that: a
    /// caller's shape error, not an input error.
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        assert!(
            rows.checked_mul(cols).is_some_and(|len| len <= data.len()),
            "a {rows} x {cols} matrix in {} values",
            data.len()
        );
        Self {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// `rows x cols` with `row_stride` between rows' starts (a block of a wider matrix, or
    /// every `k`-th row of one). Panics if the last row runs past `data`.
    pub fn strided(data: &'a [f32], rows: usize, cols: usize, row_stride: usize) -> Self {
        assert!(
            rows == 0
                || cols == 0
                || last_end(rows, row_stride, cols).is_some_and(|end| end <= data.len()),
            "{rows} rows of {cols} every {row_stride} in {} values",
            data.len()
        );
        Self {
            data,
            rows,
            cols,
            row_stride,
            col_stride: 1,
        }
    }

    /// The transpose (no copy).
    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// `dst = lhs @ rhs`, or `dst += lhs @ rhs` when `accumulate`; `dst` row-major `[lhs.rows,
/// rhs.cols]`. Panics if the inner sizes differ or `dst` is too short (callers' shape errors).
pub fn gemm(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, accumulate: bool) {
    let n = rhs.cols;
    gemm_strided(dst, n, lhs, rhs, accumulate);
}

/// [`gemm()`] into rows `row_stride` apart in `dst` (a block of a wider matrix, or every `k`-th
/// row of one).
pub fn gemm_strided(
    dst: &mut [f32],
    row_stride: usize,
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    accumulate: bool,
) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    assert_eq!(
        k, rhs.rows,
        "inner sizes of a [{m}, {k}] @ [{}, {n}]",
        rhs.rows
    );
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        row_stride >= n && last_end(m, row_stride, n).is_some_and(|end| end <= dst.len()),
        "a [{m}, {n}] product every {row_stride} in {} values",
        dst.len()
    );
    if k == 0 {
        if !accumulate {
            for row in 0..m {
                dst[row * row_stride..row * row_stride + n].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: the asserts above and MatRef's constructors keep every index the kernel reads
    // ((m-1, k-1) of lhs, (k-1, n-1) of rhs) and writes ((m-1, n-1) of dst) inside its slice;
    // dst is borrowed mutably, so it aliases neither operand.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            row_stride as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// `src` written row-major into `dst` (`[src.rows, src.cols]`): of a transposed view, the
/// transpose. Panics if `dst` is too short (a caller's shape error).
pub fn copy_into(dst: &mut [f32], src: MatRef<'_>) {
    let (rows, cols) = (src.rows, src.cols);
    assert!(
        rows.checked_mul(cols).is_some_and(|len| len <= dst.len()),
        "a {rows} x {cols} matrix into {} values",
        dst.len()
    );
    if cols == 0 {
        return;
    }
    for (r, row) in dst.chunks_exact_mut(cols).take(rows).enumerate() {
        for (c, d) in row.iter_mut().enumerate() {
            *d = src.data[r * src.row_stride + c * src.col_stride];
        }
    }
}

/// Adds every `sums.len()`-wide row of `rows` into `sums`: a row-major matrix's column sums
/// (a bias's gradient), accumulated.
pub fn add_rows(sums: &mut [f32], rows: &[f32]) {
    if sums.is_empty() {
        return;
    }
    for row in rows.chunks_exact(sums.len()) {
        for (sum, value) in sums.iter_mut().zip(row) {
            *sum += value;
        }
    }
}

/// A product shape of the host kernels, `[m, k] @ [k, n]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    /// What the shape is in Quench's kernels.
    pub label: &'static str,
    /// Rows of the product.
    pub m: usize,
    /// Inner size.
    pub k: usize,
    /// Columns of the product.
    pub n: usize,
}

impl GemmShape {
    /// Flops of one product: `2 m k n`.
    pub fn flops(&self) -> f64 {
        2.0 * (self.m * self.k * self.n) as f64
    }
}

/// The shapes `benchmark doctor` measures: the LSTM's step and input projection and the
/// Transformer's feed-forward at the guide's batch of 256 windows of 20 bars, and a square one.
pub const KERNEL_SHAPES: [GemmShape; 4] = [
    GemmShape {
        label: "LSTM step [256,128]@[128,512]",
        m: 256,
        k: 128,
        n: 512,
    },
    GemmShape {
        label: "LSTM projection [5120,256]@[256,512]",
        m: 5120,
        k: 256,
        n: 512,
    },
    GemmShape {
        label: "feed-forward [5120,128]@[128,512]",
        m: 5120,
        k: 128,
        n: 512,
    },
    GemmShape {
        label: "square [1024,1024]@[1024,1024]",
        m: 1024,
        k: 1024,
        n: 1024,
    },
];

/// Runs `shape`'s product on each of `lanes` threads at once (each thread its own operands,
/// as the host kernels give each core its own rows), `repeats` times after one untimed run;
/// returns each run's seconds per product and thread. A run repeats the product on each
/// thread for about 2 GFLOP, as the LSTM's rows run twenty steps per thread.
pub fn time_product(shape: GemmShape, lanes: usize, repeats: usize) -> Vec<f64> {
    let GemmShape { m, k, n, .. } = shape;
    // Values in [-1, 1) from a fixed recurrence: the time does not depend on them.
    let fill = |len: usize, salt: u32| -> Vec<f32> {
        (0..len as u32)
            .map(|i| {
                (i.wrapping_mul(2_654_435_761).wrapping_add(salt) >> 8) as f32 / 8_388_608.0 - 1.0
            })
            .collect()
    };
    let lanes = lanes.max(1);
    let mut operands: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = (0..lanes as u32)
        .map(|l| (fill(m * k, 2 * l), fill(k * n, 2 * l + 1), vec![0.0; m * n]))
        .collect();
    let inner = (2e9 / shape.flops()).ceil().max(1.0) as usize;
    let mut once = || {
        let jobs: Vec<_> = operands.iter_mut().collect();
        crate::lanes::in_lanes(jobs, lanes, |group| {
            for (a, b, c) in group {
                for _ in 0..inner {
                    gemm(
                        c,
                        MatRef::row_major(a, m, k),
                        MatRef::row_major(b, k, n),
                        false,
                    );
                }
            }
        });
    };
    once();
    (0..repeats.max(1))
        .map(|_| {
            let start = std::time::Instant::now();
            once();
            start.elapsed().as_secs_f64() / inner as f64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "matrix in 4 values")]
    fn a_shape_whose_size_overflows_is_refused() {
        let _ = MatRef::row_major(&[0.0; 4], 1 << 32, 1 << 32);
    }

    #[test]
    fn a_product_overwrites_or_adds_and_rows_sum_into_columns() {
        let mut dst = [f32::NAN; 4];
        // [[1, 2], [3, 4]] @ 2 I, over old values that must not be read, then added to.
        let (a, twice) = ([1.0, 2.0, 3.0, 4.0], [2.0, 0.0, 0.0, 2.0]);
        let (a, twice) = (MatRef::row_major(&a, 2, 2), MatRef::row_major(&twice, 2, 2));
        gemm(&mut dst, a, twice, false);
        assert_eq!(dst, [2.0, 4.0, 6.0, 8.0]);
        gemm(&mut dst, a, twice, true);
        assert_eq!(dst, [4.0, 8.0, 12.0, 16.0]);
        let mut sums = [1.0, 1.0];
        add_rows(&mut sums, &dst);
        assert_eq!(sums, [17.0, 25.0]);
        add_rows(&mut [], &dst);
    }

    #[test]
    fn products_of_every_layout_agree_with_f64() {
        // Small and larger than the kernel's blocks, right operands row-major and transposed,
        // one inner value and many.
        for (m, k, n, transposed) in [
            (20, 16, 20, false),
            (20, 16, 20, true),
            (3, 1, 5, true),
            (1, 100, 100, true),
            (70, 30, 40, false),
            (70, 30, 40, true),
        ] {
            let value =
                |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 97) as f32 / 48.0 - 1.0;
            let a: Vec<f32> = (0..m * k).map(|i| value(i, 1)).collect();
            let b: Vec<f32> = (0..k * n).map(|i| value(i, 2)).collect();
            let rhs = if transposed {
                MatRef::row_major(&b, n, k).t()
            } else {
                MatRef::row_major(&b, k, n)
            };
            let b_at = |p: usize, j: usize| {
                if transposed {
                    b[j * k + p]
                } else {
                    b[p * n + j]
                }
            };
            // Into every other column of a wider matrix: over old values that must not be
            // read (NaN), then added to what is there; the columns between stay as they are.
            let stride = 2 * n;
            let mut dst: Vec<f32> = (0..m * stride)
                .map(|i| if i % stride < n { f32::NAN } else { 0.25 })
                .collect();
            for (accumulate, times) in [(false, 1.0), (true, 2.0)] {
                gemm_strided(
                    &mut dst,
                    stride,
                    MatRef::row_major(&a, m, k),
                    rhs,
                    accumulate,
                );
                for i in 0..m {
                    for j in 0..stride {
                        let want = if j < n {
                            times
                                * (0..k)
                                    .map(|p| f64::from(a[i * k + p]) * f64::from(b_at(p, j)))
                                    .sum::<f64>()
                        } else {
                            0.25
                        };
                        let got = f64::from(dst[i * stride + j]);
                        assert!(
                            (got - want).abs() < 1e-4,
                            "[{m}, {k}] @ [{k}, {n}] (transposed {transposed}, accumulate \
                             {accumulate}) at ({i}, {j}): {got} against {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn strided_blocks_multiply_in_place() {
        // Every other row of a [4, 2] lhs, times [2, 1], into every third value of dst.
        let lhs = [1.0, 2.0, 9.0, 9.0, 3.0, 4.0, 9.0, 9.0];
        let rhs = [10.0, 1.0];
        let mut dst = [0.5; 6];
        gemm_strided(
            &mut dst,
            3,
            MatRef::strided(&lhs, 2, 2, 4),
            MatRef::row_major(&rhs, 2, 1),
            true,
        );
        assert_eq!(dst, [12.5, 0.5, 0.5, 34.5, 0.5, 0.5]);
    }

    #[test]
    fn products_of_transposed_views_accumulate_as_written() {
        // a [2, 3], b [3, 2] stored transposed as [2, 3].
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b_t = [1.0, 0.0, -1.0, 2.0, 1.0, 0.5];
        let mut dst = [10.0; 4];
        gemm(
            &mut dst,
            MatRef::row_major(&a, 2, 3),
            MatRef::row_major(&b_t, 2, 3).t(),
            true,
        );
        // a @ b = [[1 - 3, 2 + 2 + 1.5], [4 - 6, 8 + 5 + 3]] = [[-2, 5.5], [-2, 16]].
        assert_eq!(dst, [8.0, 15.5, 8.0, 26.0]);
        gemm(
            &mut dst,
            MatRef::row_major(&a, 2, 3).t().t(),
            MatRef::row_major(&b_t, 2, 3).t(),
            false,
        );
        assert_eq!(dst, [-2.0, 5.5, -2.0, 16.0]);
        // An empty inner size gives zeros (or leaves an accumulator alone).
        gemm(
            &mut dst,
            MatRef::row_major(&[], 2, 0),
            MatRef::row_major(&[], 0, 2),
            false,
        );
        assert_eq!(dst, [0.0; 4]);
    }
}
