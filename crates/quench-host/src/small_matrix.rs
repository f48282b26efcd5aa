//! Stacks of dense square matrices small enough to hold whole (the Lindbladian of a qubit or
//! two in a real basis, `n = d^2` up to 16) in f64, batch last: `[n, n, batch]`, entry `(i, j)`
//! of matrix `b` at `(i * n + j) * batch + b`, so that every step is a loop over the batch
//! that vectorises. Products, a polynomial raised to a power of two, and its Fréchet
//! derivative.

/// A matrix function `r(X) = p(X)^(2^squarings)` with `p(X) = sum_k coefficients[k] X^k`: the
/// scaling-and-squaring form of the exponential (Taylor coefficients `1/k!` of `X / 2^s`).
#[derive(Clone, Debug, PartialEq)]
pub struct SquaredPolynomial {
    /// `p`'s coefficients from degree 0 up (at least one).
    pub coefficients: Vec<f64>,
    /// How often `p(X)` is squared.
    pub squarings: u32,
}

/// `a b` of every pair of `[n, n, batch]` stacks, into `out`.
pub fn product(a: &[f64], b: &[f64], out: &mut [f64], n: usize, batch: usize) {
    for i in 0..n {
        for j in 0..n {
            let o = &mut out[(i * n + j) * batch..][..batch];
            o.fill(0.0);
            for k in 0..n {
                let a_ik = &a[(i * n + k) * batch..][..batch];
                let b_kj = &b[(k * n + j) * batch..][..batch];
                o.iter_mut()
                    .zip(a_ik.iter().zip(b_kj))
                    .for_each(|(o, (x, y))| *o += x * y);
            }
        }
    }
}

/// `m += c I` for every matrix of a `[n, n, batch]` stack.
fn add_diagonal(m: &mut [f64], c: f64, n: usize, batch: usize) {
    for i in 0..n {
        m[(i * n + i) * batch..][..batch]
            .iter_mut()
            .for_each(|v| *v += c);
    }
}

/// `a += b`.
fn accumulate(a: &mut [f64], b: &[f64]) {
    a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
}

/// Every matrix of a `[n, n, batch]` stack transposed.
pub fn transpose(x: &[f64], n: usize, batch: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for i in 0..n {
        for j in 0..n {
            out[(i * n + j) * batch..][..batch].copy_from_slice(&x[(j * n + i) * batch..][..batch]);
        }
    }
    out
}

impl SquaredPolynomial {
    /// The exponential's form: the Taylor polynomial of degree `degree` (coefficients `1/k!`),
    /// then `squarings` squarings (for `exp(X 2^squarings)` of a scaled `X`).
    pub fn taylor(degree: usize, squarings: u32) -> Self {
        let mut coefficients = vec![1.0; degree + 1];
        for k in 1..=degree {
            coefficients[k] = coefficients[k - 1] / k as f64;
        }
        Self {
            coefficients,
            squarings,
        }
    }

    /// `r(x)` of every matrix of a `[n, n, batch]` stack: Horner's rule for `p`, then the
    /// squarings.
    pub fn evaluate(&self, x: &[f64], n: usize, batch: usize) -> Vec<f64> {
        let (mut p, mut next) = (self.leading(n, batch), vec![0.0; x.len()]);
        for &c in self.coefficients.iter().rev().skip(1) {
            product(x, &p, &mut next, n, batch);
            add_diagonal(&mut next, c, n, batch);
            std::mem::swap(&mut p, &mut next);
        }
        for _ in 0..self.squarings {
            product(&p, &p, &mut next, n, batch);
            std::mem::swap(&mut p, &mut next);
        }
        p
    }

    /// `r(x)` and its Fréchet derivative `L_r(x)[e]` in the direction `e`, for every matrix of
    /// `[n, n, batch]` stacks: the same recurrences carried on the pair (what `r` of the block
    /// matrix `[[x, e], [0, x]]` holds in its upper-right block), so `L` is the exact
    /// derivative of the computed `r`. Horner's step `P <- x P + c I` takes `L <- e P + x L`;
    /// a squaring `L <- P L + L P`.
    ///
    /// For a real polynomial the adjoint of `L_r(x)` is `L_r(x^T)`: the gradient of a loss
    /// with respect to `x`, given its gradient `g` with respect to `r(x)`, is
    /// `derivative(x^T, g).1`.
    pub fn derivative(&self, x: &[f64], e: &[f64], n: usize, batch: usize) -> (Vec<f64>, Vec<f64>) {
        let mut p = self.leading(n, batch);
        let mut l = vec![0.0; x.len()];
        let (mut next_p, mut next_l, mut term) =
            (vec![0.0; x.len()], vec![0.0; x.len()], vec![0.0; x.len()]);
        for &c in self.coefficients.iter().rev().skip(1) {
            product(e, &p, &mut next_l, n, batch);
            product(x, &l, &mut term, n, batch);
            accumulate(&mut next_l, &term);
            product(x, &p, &mut next_p, n, batch);
            add_diagonal(&mut next_p, c, n, batch);
            std::mem::swap(&mut p, &mut next_p);
            std::mem::swap(&mut l, &mut next_l);
        }
        for _ in 0..self.squarings {
            product(&p, &l, &mut next_l, n, batch);
            product(&l, &p, &mut term, n, batch);
            accumulate(&mut next_l, &term);
            product(&p, &p, &mut next_p, n, batch);
            std::mem::swap(&mut p, &mut next_p);
            std::mem::swap(&mut l, &mut next_l);
        }
        (p, l)
    }

    /// `c_top I` for every matrix, Horner's start (zero when there is no coefficient at all).
    fn leading(&self, n: usize, batch: usize) -> Vec<f64> {
        let mut p = vec![0.0; n * n * batch];
        add_diagonal(
            &mut p,
            self.coefficients.last().copied().unwrap_or(0.0),
            n,
            batch,
        );
        p
    }

    /// Products of `n x n` matrices per matrix that [`Self::evaluate`] takes (`derivative`
    /// takes about four times as many).
    pub fn products(&self) -> usize {
        self.coefficients.len().saturating_sub(1) + self.squarings as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taylor(degree: usize, squarings: u32) -> SquaredPolynomial {
        SquaredPolynomial::taylor(degree, squarings)
    }

    #[test]
    fn the_exponential_of_a_rotation_generator_is_the_rotation() {
        // exp([[0, -t], [t, 0]]) = [[cos t, -sin t], [sin t, cos t]], for two angles at once
        // (batch last); degree 12 of t / 4 (at most 0.375) leaves a remainder below
        // 0.375^13 / 13! < 1e-15, squared twice.
        let angles = [1.5f64, -0.7];
        let x: Vec<f64> = [[0.0, 0.0], [-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]]
            .iter()
            .flat_map(|signs| signs.iter().zip(angles).map(|(s, t)| s * t / 4.0))
            .collect();
        let got = taylor(12, 2).evaluate(&x, 2, 2);
        for (b, t) in angles.iter().enumerate() {
            let want = [t.cos(), -t.sin(), t.sin(), t.cos()];
            for (entry, w) in want.iter().enumerate() {
                let g = got[entry * 2 + b];
                assert!(
                    (g - w).abs() < 1e-14,
                    "angle {t}, entry {entry}: {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn the_derivative_is_the_difference_quotient_and_its_adjoint_the_transpose() {
        let n = 3;
        let x: Vec<f64> = (0..9).map(|i| ((i * 7 % 5) as f64 - 2.0) * 0.15).collect();
        let e: Vec<f64> = (0..9).map(|i| ((i * 3 % 4) as f64 - 1.5) * 0.2).collect();
        let g: Vec<f64> = (0..9).map(|i| ((i * 5 % 7) as f64 - 3.0) * 0.1).collect();
        let r = taylor(9, 3);
        let (p, l) = r.derivative(&x, &e, n, 1);
        assert_eq!(p, r.evaluate(&x, n, 1), "the pair's first part is r(x)");
        // A central difference: r is a polynomial of degree 72 in the entries, smooth; its
        // error is h^2 times third derivatives of order one, and rounding adds 1e-16 / h.
        let h = 1e-5;
        let shifted = |sign: f64| {
            let moved: Vec<f64> = x.iter().zip(&e).map(|(a, b)| a + sign * h * b).collect();
            r.evaluate(&moved, n, 1)
        };
        let (up, down) = (shifted(1.0), shifted(-1.0));
        for index in 0..9 {
            let quotient = (up[index] - down[index]) / (2.0 * h);
            assert!((quotient - l[index]).abs() < 1e-8, "entry {index}");
        }
        // <g, L(x)[e]> = <L(x^T)[g], e>.
        let (_, adjoint) = r.derivative(&transpose(&x, n, 1), &g, n, 1);
        let lhs: f64 = g.iter().zip(&l).map(|(a, b)| a * b).sum();
        let rhs: f64 = adjoint.iter().zip(&e).map(|(a, b)| a * b).sum();
        assert!((lhs - rhs).abs() < 1e-14, "{lhs} vs {rhs}");
    }
}
