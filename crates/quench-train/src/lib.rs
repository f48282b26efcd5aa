//! Training algorithms of Quench, all over a leading member axis.
//!
//! Every workload here is a set of independent small problems (tasks, chains, seeds, pairs).
//! They share one representation: parameters are rank-3 tensors whose first axis is the member
//! (`[members, in, out]` weights, `[members, 1, out]` biases), applied with batched matmuls, and
//! per-member hyper-parameters are `[members, 1, 1]` tensors broadcast over it. The pieces that
//! every algorithm uses live here once: [`ensemble`] (layers and MLPs), [`init`]
//! (initialisations), [`optim`] (member-axis Adam and gradient clipping) and [`params`]
//! (gradients, norms and masks per member), [`amp`] (mixed-precision steps and loss scaling).
//! [`resnet`] is the frozen ResNet18 feature extractor of the hybrid MNIST classifier, with
//! seeded random weights, BatchNorm calibration and loading of torchvision weights.
//! [`temporal`] holds the market-direction LSTM, Transformer and MLP of guide 004.

pub mod amp;
pub mod binary;
pub mod classify;
pub mod ensemble;
pub mod host_mlp;
pub mod hybrid;
pub mod init;
pub mod meta;
pub mod optim;
pub mod params;
pub mod qrng;
pub mod resnet;
pub mod settings;
pub mod sgld;
pub mod stats;
pub mod stopping;
pub mod temporal;
