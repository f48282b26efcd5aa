//! A synthetic stand-in for MNIST's classes 0 and 1, for machines without the data set.
//!
//! Each image is 28 x 28 grey levels like MNIST's: class 0 an elliptic ring, class 1 a
//! slanted stroke, each with its own position, size, slant, stroke width and brightness, plus
//! pixel noise. The two classes are told apart by shape, not by mean brightness, so a small
//! network learns them in about an epoch, as it does the real digits 0 and 1; accuracies on the
//! stand-in are not comparable with MNIST's.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// Image side in pixels (MNIST's).
pub const STAND_IN_SIDE: usize = 28;
/// Training images of the stand-in: MNIST's count of digits 0 and 1, rounded.
pub const STAND_IN_TRAIN: usize = 12_000;
/// Test images of the stand-in: MNIST's count of digits 0 and 1, rounded.
pub const STAND_IN_TEST: usize = 2_000;

/// Standard deviation of the pixel noise, in grey levels: enough that faint, short glyphs are
/// sometimes mistaken, so accuracy stays below 1 and parity checks on it mean something.
const PIXEL_NOISE: f32 = 70.0;

/// `len` images `[len, 28, 28]` (row-major grey levels) and their labels, alternating 0 and
/// 1, drawn from `seed` alone.
pub fn stand_in_digits(len: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut images = Vec::with_capacity(len * STAND_IN_SIDE * STAND_IN_SIDE);
    let mut labels = Vec::with_capacity(len);
    for index in 0..len {
        let label = (index % 2) as u8;
        let shape = Shape::draw(label, &mut rng);
        for row in 0..STAND_IN_SIDE {
            for col in 0..STAND_IN_SIDE {
                let ink = shape.ink(row as f32 + 0.5, col as f32 + 0.5);
                let noise: f32 = rng.sample(StandardNormal);
                let level = 255.0 * ink + PIXEL_NOISE * noise;
                images.push(level.clamp(0.0, 255.0) as u8);
            }
        }
        labels.push(label);
    }
    (images, labels)
}

/// One drawn glyph: its centre, size, slant and stroke, in pixels.
struct Shape {
    ring: bool,
    centre: (f32, f32),
    /// Half height and half width (a ring) or half length and 0 (a stroke).
    radii: (f32, f32),
    /// Horizontal shift per pixel down.
    slant: f32,
    /// Half the stroke width.
    half_width: f32,
    brightness: f32,
}

impl Shape {
    fn draw(label: u8, rng: &mut StdRng) -> Self {
        let centre = (
            14.0 + rng.random_range(-2.0..2.0),
            14.0 + rng.random_range(-3.0..3.0),
        );
        let ring = label == 0;
        let radii = if ring {
            (rng.random_range(4.0..10.0), rng.random_range(2.5..7.0))
        } else {
            (rng.random_range(4.0..10.0), 0.0)
        };
        Self {
            ring,
            centre,
            radii,
            slant: rng.random_range(-0.35..0.35),
            half_width: rng.random_range(0.9..1.8),
            brightness: rng.random_range(0.15..1.0),
        }
    }

    /// Ink at pixel centre `(y, x)` in 0..=1: full inside the stroke, fading over one pixel.
    fn ink(&self, y: f32, x: f32) -> f32 {
        let dy = y - self.centre.0;
        let dx = x - self.centre.1 - self.slant * dy;
        let distance = if self.ring {
            // Distance to the ellipse, to first order: |f| / |grad f| with f = r - 1 in
            // normalised coordinates.
            let (ry, rx) = self.radii;
            let (u, v) = (dy / ry, dx / rx);
            let r = (u * u + v * v).sqrt().max(1e-6);
            let gradient = ((u / (r * ry)).powi(2) + (v / (r * rx)).powi(2)).sqrt();
            (r - 1.0).abs() / gradient.max(1e-6)
        } else {
            let along = dy.abs() - self.radii.0;
            if along > 0.0 {
                (along * along + dx * dx).sqrt()
            } else {
                dx.abs()
            }
        };
        self.brightness * (1.0 - (distance - self.half_width)).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_alternate_and_are_told_apart_by_shape() {
        let n = 2_000;
        let (images, labels) = stand_in_digits(n, 3);
        let pixels = STAND_IN_SIDE * STAND_IN_SIDE;
        assert_eq!(images.len(), n * pixels);
        assert_eq!(labels.iter().filter(|&&l| l == 1).count(), n / 2);
        let image = |i: usize| &images[i * pixels..(i + 1) * pixels];
        // Class means from the first half, nearest mean on the second half.
        let mut means = [vec![0.0f64; pixels], vec![0.0f64; pixels]];
        for i in 0..n / 2 {
            for (m, &p) in means[labels[i] as usize].iter_mut().zip(image(i)) {
                *m += f64::from(p) / (n / 4) as f64;
            }
        }
        let distance = |i: usize, class: usize| -> f64 {
            image(i)
                .iter()
                .zip(&means[class])
                .map(|(&p, m)| (f64::from(p) - m).powi(2))
                .sum()
        };
        let correct = (n / 2..n)
            .filter(|&i| usize::from(distance(i, 1) < distance(i, 0)) == labels[i] as usize)
            .count();
        let accuracy = correct as f64 / (n / 2) as f64;
        // Learnable, but not trivially: faint, short glyphs in noise are sometimes mistaken.
        assert!(
            (0.75..0.99).contains(&accuracy),
            "nearest class mean: {accuracy}"
        );
    }

    #[test]
    fn the_seed_alone_decides_the_images() {
        assert_eq!(stand_in_digits(10, 5), stand_in_digits(10, 5));
        assert_ne!(stand_in_digits(10, 5).0, stand_in_digits(10, 6).0);
    }
}
