//! The classifier's fused step, on a backend without autodiff: the seam's member-MLP forward
//! pass and training step (`QuenchOps::mlp_train_step`: softmax cross-entropy, the L1
//! penalty's sign, per-member clipping and Adam), and dropout masks from a counter-based
//! stream per member (`quench_kernels::threefry`), so that a member's run is the same alone
//! or batched and from run to run. A step of the 100-30-20-3 network at batch 8 is a few
//! hundred thousand flops, which autodiff's graph of some forty small ops (and the copies
//! behind it) took several times longer to schedule than to compute; on the CPU backend the
//! training step is one host kernel.

use burn::tensor::Tensor;
use quench_data::{Dataset, Loader};
use quench_kernels::QuenchOps;
use quench_kernels::ops::mlp::{self, MlpObjective};
use quench_kernels::ops::random::{Keep, fill_mask};
use quench_kernels::readback::{float_tensor, to_host_f32};
use quench_kernels::threefry::StreamKey;

use super::{ACTIVATION, DROPOUT_STREAM, Execution, Members, Part, Program};
use crate::{QrngError, sub_seed};
use quench_train::epochs::{EpochValues, Rates, SeedMembers, active_mask, keep_improved};
use quench_train::optim::{AdamConfig, MemberAdam, Regularisation};
use std::convert::Infallible;

/// The members' weights and optimiser, stepped without autodiff.
pub(super) struct FusedMembers<'a, B: QuenchOps> {
    config: &'a super::ClassifierConfig,
    loader: Loader<B>,
    validation: Part<B>,
    test: Part<B>,
    params: Vec<Tensor<B, 3>>,
    best: Vec<Tensor<B, 3>>,
    adam: MemberAdam<B>,
    /// Each member's dropout stream; draw `d` serves step `d`.
    dropout: Vec<StreamKey>,
    /// Steps taken so far.
    steps: u64,
    device: B::Device,
}

impl<'a, B: QuenchOps> FusedMembers<'a, B> {
    pub(super) fn new(
        program: &Program<'a>,
        data: &Dataset,
        execution: &Execution,
        device: &B::Device,
    ) -> Result<Self, QrngError> {
        let config = program.config;
        let params = program.network::<B>(device).params();
        Ok(Self {
            config,
            loader: program.loader(execution.loader, device)?,
            validation: Part::upload(data, &program.splits, |s| s.validation.as_slice(), device),
            test: Part::upload(data, &program.splits, |s| s.test.as_slice(), device),
            best: params.clone(),
            params,
            adam: MemberAdam::new(AdamConfig::default(), program.seeds.len(), device),
            dropout: program
                .seeds
                .iter()
                .map(|&s| StreamKey::from_seed(sub_seed(s, DROPOUT_STREAM)))
                .collect(),
            steps: 0,
            device: device.clone(),
        })
    }

    /// This step's dropout masks for `rows` rows per member, one per hidden layer
    /// (`[members, rows, width]`, `0` or `1 / keep`); none without dropout. A value is kept
    /// where the step's uniform is below `keep` in f32, drawn by the vectorised mask kernel
    /// rather than one Threefry block at a time.
    fn masks(&self, rows: usize) -> Vec<Tensor<B, 3>> {
        let rate = self.config.dropout;
        if rate == 0.0 {
            return Vec::new();
        }
        let keep = 1.0 - rate;
        let keep = Keep::below_uniform(keep as f32, (1.0 / keep) as f32);
        let members = self.dropout.len();
        let hidden = &self.params[..self.params.len() - 2];
        let widths: Vec<usize> = hidden.chunks_exact(2).map(|l| l[0].dims()[2]).collect();
        let mut masks: Vec<Vec<f32>> = widths
            .iter()
            .map(|w| Vec::with_capacity(members * rows * w))
            .collect();
        let mut drawn = vec![0f32; rows * widths.iter().sum::<usize>()];
        for key in &self.dropout {
            fill_mask(*key, self.steps, 0, keep, &mut drawn);
            let mut at = 0;
            for (mask, &w) in masks.iter_mut().zip(&widths) {
                mask.extend_from_slice(&drawn[at..at + rows * w]);
                at += rows * w;
            }
        }
        masks
            .into_iter()
            .zip(widths)
            .map(|(mask, w)| float_tensor(mask, [members, rows, w], &self.device))
            .collect()
    }
}

impl<B: QuenchOps> SeedMembers for FusedMembers<'_, B> {
    type Error = Infallible;

    fn epoch(
        &mut self,
        epoch: usize,
        rates: &Rates,
        active: Option<&[bool]>,
    ) -> Result<EpochValues, Infallible> {
        let members = self.dropout.len();
        let lr = rates.tensor::<B>(&self.device);
        let active = active_mask::<B>(active, &self.device);
        let regularisation = Regularisation {
            l1: self.config.l1,
            clip_norm: Some(self.config.clip_norm),
        };
        let mut loss_sum = Tensor::<B, 1>::zeros([members], &self.device);
        let batches: Vec<_> = self.loader.epoch(epoch as u64).collect();
        for batch in batches {
            let rows = batch.features.dims()[1];
            let tape = mlp::forward(&self.params, ACTIVATION, batch.features, self.masks(rows));
            let (params, losses) = self.adam.step_mlp(
                std::mem::take(&mut self.params),
                ACTIVATION,
                tape,
                MlpObjective::CrossEntropy(batch.labels),
                regularisation,
                lr.clone(),
                active.clone(),
            );
            self.params = params;
            if let Some(losses) = losses {
                loss_sum = loss_sum + losses;
            }
            self.steps += 1;
        }
        // One read per epoch: the schedule needs both.
        Ok(EpochValues::read(
            self.validation.accuracy(&self.params),
            loss_sum,
        ))
    }

    fn keep_best(&mut self, improved: &[bool]) {
        let best = std::mem::take(&mut self.best);
        self.best = keep_improved(best, &self.params, improved, &self.device);
    }

    fn batches(&self) -> usize {
        self.loader.batches()
    }
}

impl<B: QuenchOps> Members for FusedMembers<'_, B> {
    fn test_accuracy(&self) -> Vec<f32> {
        to_host_f32(self.test.accuracy(&self.best))
    }
}
