//! Noise tasks of the meta-learning workload and the policy's view of them.

use burn::tensor::{Tensor, TensorData};
use quench_kernels::QuenchOps;
use quench_lindblad::noise::{SpectralTaskRanges, Spectrum};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// One coordinate of the task space: its name, range, and whether the policy sees its
/// logarithm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskAxis {
    /// Name in configurations and histories.
    pub name: &'static str,
    /// Smallest value (tasks are drawn uniformly on `[low, high]`).
    pub low: f64,
    /// Largest value.
    pub high: f64,
    /// Whether normalised features use `ln(value)`: for axes spanning a decade.
    pub log_feature: bool,
}

/// The task family: which physical parameters a task draws, and how they become rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskFamily {
    /// `(alpha, A, omega_c)` of the 1/f spectrum, one rate `G` for the three Pauli jumps.
    #[default]
    OneOverF,
    /// `(alpha, A, omega_c)` of the Lorentzian spectrum (`alpha` unused by the physics).
    Lorentzian,
    /// `(alpha, A, omega_c)` of the double-exponential spectrum.
    DoubleExponential,
    /// `(g_deph, g_relax)` of the direct-rate relax-dephase system.
    DirectRates,
}

impl TaskFamily {
    /// The axes of this family, in task-vector order: the guide's ranges.
    pub fn axes(self) -> Vec<TaskAxis> {
        match self {
            Self::DirectRates => vec![
                TaskAxis {
                    name: "g_deph",
                    low: 0.02,
                    high: 0.15,
                    log_feature: false,
                },
                TaskAxis {
                    name: "g_relax",
                    low: 0.01,
                    high: 0.08,
                    log_feature: false,
                },
            ],
            _ => {
                let r = SpectralTaskRanges::default();
                vec![
                    TaskAxis {
                        name: "alpha",
                        low: r.alpha.0,
                        high: r.alpha.1,
                        log_feature: false,
                    },
                    TaskAxis {
                        name: "A",
                        low: r.amplitude.0,
                        high: r.amplitude.1,
                        log_feature: true,
                    },
                    TaskAxis {
                        name: "omega_c",
                        low: r.omega_c.0,
                        high: r.omega_c.1,
                        log_feature: true,
                    },
                ]
            }
        }
    }

    /// The spectrum of a spectral family; `None` for direct rates.
    pub fn spectrum(self) -> Option<Spectrum> {
        match self {
            Self::OneOverF => Some(Spectrum::OneOverF),
            Self::Lorentzian => Some(Spectrum::Lorentzian),
            Self::DoubleExponential => Some(Spectrum::DoubleExponential),
            Self::DirectRates => None,
        }
    }

    /// Draws `count` tasks, each a vector of [`axes`](Self::axes) values.
    pub fn sample(self, count: usize, rng: &mut StdRng) -> Vec<Vec<f64>> {
        let axes = self.axes();
        (0..count)
            .map(|_| {
                axes.iter()
                    .map(|a| rng.random_range(a.low..=a.high))
                    .collect()
            })
            .collect()
    }
}

/// How the policy sees a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Features {
    /// Each axis mapped to `[-1, 1]` over its range (log scale where the axis spans a decade).
    #[default]
    Normalised,
    /// The raw task vector, as the original (`omega_c` in the hundreds saturates the first
    /// tanh layer): `seed-compatible`.
    Raw,
}

/// The policy inputs of `tasks`: `[tasks, 1, axes]`.
pub fn feature_tensor<B: QuenchOps>(
    family: TaskFamily,
    features: Features,
    tasks: &[Vec<f64>],
    device: &B::Device,
) -> Tensor<B, 3> {
    let axes = family.axes();
    let values: Vec<f32> = tasks
        .iter()
        .flat_map(|task| {
            task.iter()
                .zip(axes.iter())
                .map(move |(&v, axis)| match features {
                    Features::Raw => v as f32,
                    Features::Normalised => {
                        let (x, lo, hi) = if axis.log_feature {
                            (v.ln(), axis.low.ln(), axis.high.ln())
                        } else {
                            (v, axis.low, axis.high)
                        };
                        (2.0 * (x - lo) / (hi - lo) - 1.0) as f32
                    }
                })
        })
        .collect();
    Tensor::from_data(
        TensorData::new(values, [tasks.len(), 1, axes.len()]),
        device,
    )
}

/// A seeded stream of task batches: training and validation use different seeds, so
/// validation tasks are always fresh.
#[derive(Debug, Clone)]
pub struct TaskStream {
    family: TaskFamily,
    rng: StdRng,
}

impl TaskStream {
    /// A stream of `family` tasks from `seed`.
    pub fn new(family: TaskFamily, seed: u64) -> Self {
        Self {
            family,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The next `count` tasks.
    pub fn next_batch(&mut self, count: usize) -> Vec<Vec<f64>> {
        self.family.sample(count, &mut self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    #[test]
    fn tasks_lie_in_their_ranges_and_streams_repeat() {
        let mut a = TaskStream::new(TaskFamily::OneOverF, 5);
        let mut b = TaskStream::new(TaskFamily::OneOverF, 5);
        let tasks = a.next_batch(200);
        assert_eq!(tasks, b.next_batch(200));
        for task in &tasks {
            for (v, axis) in task.iter().zip(&TaskFamily::OneOverF.axes()) {
                assert!((axis.low..=axis.high).contains(v), "{} = {v}", axis.name);
            }
        }
        assert_ne!(
            TaskStream::new(TaskFamily::OneOverF, 6).next_batch(1),
            tasks[..1]
        );
    }

    #[test]
    fn normalised_features_span_minus_one_to_one_and_raw_ones_do_not() {
        let device = Default::default();
        let tasks = vec![
            vec![0.5, 0.001, 100.0],
            vec![2.0, 0.01, 1000.0],
            vec![1.25, (0.001f64 * 0.01).sqrt(), (100f64 * 1000.0).sqrt()],
        ];
        let f = feature_tensor::<NdArray<f32>>(
            TaskFamily::OneOverF,
            Features::Normalised,
            &tasks,
            &device,
        );
        assert_eq!(f.dims(), [3, 1, 3]);
        let v = f.into_data().to_vec::<f32>().unwrap();
        for (got, want) in v
            .iter()
            .zip([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
        {
            assert!((got - want).abs() < 1e-5, "{v:?}");
        }
        let raw =
            feature_tensor::<NdArray<f32>>(TaskFamily::OneOverF, Features::Raw, &tasks, &device);
        assert_eq!(raw.into_data().to_vec::<f32>().unwrap()[2], 100.0);
    }
}
