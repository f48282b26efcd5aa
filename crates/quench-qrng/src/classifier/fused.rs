//! The classifier's step on the CPU backend: the members' networks in host memory
//! ([`HostMlp`]), the loss's gradient derived by hand (softmax cross-entropy, the L1
//! penalty's sign), per-member clipping and Adam in one pass per parameter, and dropout masks
//! from a counter-based stream per member (`quench_kernels::threefry`), so that a member's run
//! is the same alone or batched and from run to run. A step of the 100-30-20-3 network at
//! batch 8 is a few hundred thousand flops, which autodiff's graph of some forty small ops
//! (and the copies behind it) took several times longer to schedule than to compute.

use quench_data::{Dataset, Loader, Mode};
use quench_kernels::QuenchOps;
use quench_kernels::ops::random::fill_uniforms;
use quench_kernels::threefry::StreamKey;

use super::{DROPOUT_STREAM, Members, Program, part_values, rates_f32};
use crate::{QrngError, sub_seed};
use quench_train::epochs::{EpochValues, Rates, SeedMembers};
use quench_train::host_mlp::{HostAdam, HostLayer, HostMlp};
use quench_train::optim::AdamConfig;
use std::convert::Infallible;

/// The members in host memory.
pub(super) struct HostMembers<'a, B: QuenchOps> {
    config: &'a super::ClassifierConfig,
    /// Assembles each batch on the host (no threads, no device).
    loader: Loader<B>,
    network: HostMlp,
    best: HostMlp,
    adam: HostAdam,
    validation: HostPart,
    test: HostPart,
    /// Each member's dropout stream; draw `d` serves step `d`.
    dropout: Vec<StreamKey>,
    /// Steps taken so far.
    steps: u64,
}

/// A split part of every member in host memory.
struct HostPart {
    /// `[members, samples, bits]`.
    features: Vec<f32>,
    /// `[members, samples]`.
    labels: Vec<i64>,
    samples: usize,
}

impl HostPart {
    /// Accuracy of each member of `network` on its own samples (the first largest logit is
    /// the prediction, as the tensor form's `argmax` takes it).
    fn accuracy(&self, network: &HostMlp) -> Vec<f32> {
        let logits = network.forward(&self.features, self.samples).output;
        let classes = logits.len() / self.labels.len().max(1);
        let correct: Vec<bool> = logits
            .chunks_exact(classes.max(1))
            .zip(&self.labels)
            .map(|(row, &label)| first_max(row) == label as usize)
            .collect();
        correct
            .chunks(self.samples.max(1))
            .map(|member| member.iter().filter(|&&c| c).count() as f32 / self.samples.max(1) as f32)
            .collect()
    }
}

/// The index of the first largest value.
fn first_max(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

impl<'a, B: QuenchOps> HostMembers<'a, B> {
    pub(super) fn new(
        program: &Program<'a>,
        data: &Dataset,
        device: &B::Device,
    ) -> Result<Self, QrngError> {
        let config = program.config;
        let loader = program.loader(Mode::ON_CALLER, device)?;
        let network = HostMlp::from_ensemble(&program.network::<B>(device));
        let part = |pick| {
            let (features, labels, samples) = part_values(data, &program.splits, pick);
            HostPart {
                features,
                labels,
                samples,
            }
        };
        Ok(Self {
            config,
            loader,
            adam: HostAdam::new(AdamConfig::default(), &network),
            best: network.clone(),
            network,
            validation: part(|s| s.validation.as_slice()),
            test: part(|s| s.test.as_slice()),
            dropout: program
                .seeds
                .iter()
                .map(|&s| StreamKey::from_seed(sub_seed(s, DROPOUT_STREAM)))
                .collect(),
            steps: 0,
        })
    }

    /// This step's dropout masks for `rows` rows per member, one per hidden layer
    /// (`[members, rows, width]`, `0` or `1 / keep`); none without dropout.
    fn masks(&self, rows: usize) -> Vec<Vec<f32>> {
        let rate = self.config.dropout;
        if rate == 0.0 {
            return Vec::new();
        }
        let keep = 1.0 - rate;
        let (threshold, scale) = (keep as f32, (1.0 / keep) as f32);
        let hidden = &self.network.layers[..self.network.layers.len() - 1];
        let widths: Vec<usize> = hidden.iter().map(|l| rows * l.fan_out).collect();
        let mut masks: Vec<Vec<f32>> = widths
            .iter()
            .map(|w| Vec::with_capacity(self.dropout.len() * w))
            .collect();
        let mut uniforms = vec![0f32; widths.iter().sum()];
        for key in &self.dropout {
            fill_uniforms(*key, self.steps, &mut uniforms);
            let mut at = 0;
            for (mask, &w) in masks.iter_mut().zip(&widths) {
                mask.extend(
                    uniforms[at..at + w]
                        .iter()
                        .map(|&u| if u < threshold { scale } else { 0.0 }),
                );
                at += w;
            }
        }
        masks
    }

    /// The gradient of every member's mean cross-entropy at its logits `[members, rows,
    /// classes]`, `(softmax - one-hot) / rows`, and each member's mean loss.
    fn cross_entropy(logits: &[f32], labels: &[i64], members: usize) -> (Vec<f32>, Vec<f32>) {
        let rows = labels.len() / members.max(1);
        let classes = logits.len() / labels.len().max(1);
        let mut gradient = vec![0f32; logits.len()];
        let mut losses = vec![0f32; members];
        for (r, ((z, g), &label)) in logits
            .chunks_exact(classes)
            .zip(gradient.chunks_exact_mut(classes))
            .zip(labels)
            .enumerate()
        {
            let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = z.iter().map(|&v| (v - max).exp()).sum();
            let log_sum = sum.ln();
            let label = label as usize;
            losses[r / rows] += (max + log_sum - z[label]) / rows as f32;
            for (k, (g, &v)) in g.iter_mut().zip(z).enumerate() {
                let p = (v - max).exp() / sum;
                *g = (p - f32::from(u8::from(k == label))) / rows as f32;
            }
        }
        (gradient, losses)
    }

    /// Adds `l1 sign(p)` to every gradient and returns each member's penalty `sum |p|`.
    fn add_l1(&self, gradients: &mut [HostLayer]) -> Vec<f32> {
        let members = self.network.members;
        let l1 = self.config.l1 as f32;
        let mut penalty = vec![0f32; members];
        for (g, layer) in gradients.iter_mut().zip(&self.network.layers) {
            for (grads, values) in [(&mut g.weight, &layer.weight), (&mut g.bias, &layer.bias)] {
                let per = values.len() / members.max(1);
                for (m, (grads, values)) in
                    grads.chunks_mut(per).zip(values.chunks(per)).enumerate()
                {
                    for (g, &p) in grads.iter_mut().zip(values) {
                        // The subgradient autodiff takes: 0 at 0.
                        let sign = if p > 0.0 {
                            1.0
                        } else if p < 0.0 {
                            -1.0
                        } else {
                            0.0
                        };
                        *g += l1 * sign;
                        penalty[m] += p.abs();
                    }
                }
            }
        }
        penalty
    }

    /// Scales each member's whole gradient to a norm of at most `clip_norm` (coefficient
    /// `clip_norm / (norm + 1e-6)`, capped at 1, as PyTorch's `clip_grad_norm_`).
    fn clip(&self, gradients: &mut [HostLayer]) {
        let members = self.network.members;
        let mut squares = vec![0f32; members];
        for g in gradients.iter() {
            for values in [&g.weight, &g.bias] {
                let per = values.len() / members.max(1);
                for (s, member) in squares.iter_mut().zip(values.chunks(per)) {
                    *s += member.iter().map(|v| v * v).sum::<f32>();
                }
            }
        }
        let max_norm = self.config.clip_norm as f32;
        let coefficients: Vec<f32> = squares
            .iter()
            .map(|s| (max_norm / (s.sqrt() + 1e-6)).min(1.0))
            .collect();
        for g in gradients.iter_mut() {
            for values in [&mut g.weight, &mut g.bias] {
                let per = values.len() / members.max(1);
                for (c, member) in coefficients.iter().zip(values.chunks_mut(per)) {
                    member.iter_mut().for_each(|v| *v *= c);
                }
            }
        }
    }
}

impl<B: QuenchOps> SeedMembers for HostMembers<'_, B> {
    type Error = Infallible;

    fn epoch(
        &mut self,
        epoch: usize,
        rates: &Rates,
        active: Option<&[bool]>,
    ) -> Result<EpochValues, Infallible> {
        let members = self.network.members;
        // The rates the tensor form computes with (f32), so both forms step alike.
        let lrs: Vec<f64> = rates_f32(rates, members)
            .into_iter()
            .map(f64::from)
            .collect();
        let all = vec![true; members];
        let active = active.unwrap_or(&all);
        let mut loss_sum = vec![0f32; members];
        let l1 = self.config.l1 as f32;
        let batches: Vec<(Vec<f32>, Vec<i64>)> = self.loader.host_epoch(epoch as u64).collect();
        for (features, labels) in batches {
            let rows = labels.len() / members.max(1);
            let trace = self
                .network
                .forward_with_dropout(&features, rows, self.masks(rows));
            let (upstream, losses) = Self::cross_entropy(&trace.output, &labels, members);
            let mut gradients = self.network.backward(&trace, &upstream);
            let penalty = self.add_l1(&mut gradients);
            for ((sum, loss), penalty) in loss_sum.iter_mut().zip(losses).zip(penalty) {
                *sum += loss + penalty * l1;
            }
            self.clip(&mut gradients);
            self.adam.step(&mut self.network, &gradients, &lrs, active);
            self.steps += 1;
        }
        Ok(EpochValues {
            validation: self.validation.accuracy(&self.network),
            loss_sum,
        })
    }

    fn keep_best(&mut self, improved: &[bool]) {
        self.best.copy_members(&self.network, improved);
    }

    fn batches(&self) -> usize {
        self.loader.batches()
    }
}

impl<B: QuenchOps> Members for HostMembers<'_, B> {
    fn test_accuracy(&self) -> Vec<f32> {
        self.test.accuracy(&self.best)
    }
}
