//! The hybrid classifier's data: the original's train/validation split of the training images
//! and the frozen backbone's features, computed once per image when asked.

use burn::tensor::Tensor;
use quench_data::{DataError, Dataset, MNIST_PIXELS, MNIST_SIDE, check_mnist_images};
use quench_kernels::QuenchOps;
use quench_kernels::readback::{float_tensor, to_host_f32};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::resnet::{Inference, ResNet18};

/// Images uploaded per backbone call when features are computed for a whole split (the
/// backbone itself works through them 64 at a time): few calls, and at most 256 x 784 pixels
/// in flight.
pub const FEATURE_CHUNK: usize = 256;

/// How many samples each part keeps; 0 keeps the original's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sizes {
    /// Training samples (the original: 54,000, 90 % of the training images).
    pub train: usize,
    /// Validation samples (the original: the other 6,000).
    pub validation: usize,
    /// Test samples (the original: all 10,000).
    pub test: usize,
}

/// Train, validation and test parts: images `[784]` normalised, or backbone features `[512]`.
#[derive(Debug, Clone)]
pub struct HybridData {
    /// Training part.
    pub train: Dataset,
    /// Validation part (model selection and early stopping).
    pub validation: Dataset,
    /// Test part (the reported accuracy).
    pub test: Dataset,
}

impl HybridData {
    /// Refuses parts that a training at `batch_size` cannot use: an empty validation or test
    /// part, or a training part smaller than one batch (the last partial batch is dropped, so
    /// no step would run). Called by [`crate::train_hybrid`], and before any work by callers
    /// that prepare the data for several settings.
    pub fn check(&self, batch_size: usize) -> Result<(), crate::HybridError> {
        for (name, part) in [("validation", &self.validation), ("test", &self.test)] {
            if part.is_empty() {
                return Err(crate::HybridError::InvalidValue {
                    name,
                    value: "0 samples".into(),
                    reason: "needs at least one sample",
                });
            }
        }
        if self.train.len() < batch_size {
            return Err(crate::HybridError::InvalidValue {
                name: "batch_size",
                value: batch_size.to_string(),
                reason: "larger than the training part (the last partial batch is dropped)",
            });
        }
        Ok(())
    }

    /// The original's split of `train_images` (shuffled by `seed`, 90 % train and 10 %
    /// validation, as `random_split(.., [54000, 6000])` with seed 42), each part cut to `sizes`,
    /// and the first `sizes.test` images of `test_images`.
    pub fn split(
        train_images: &Dataset,
        test_images: &Dataset,
        sizes: Sizes,
        seed: u64,
    ) -> Result<Self, DataError> {
        let mut order: Vec<usize> = (0..train_images.len()).collect();
        order.shuffle(&mut StdRng::seed_from_u64(seed));
        let cut = train_images.len() * 9 / 10;
        let (train, validation) = order.split_at(cut);
        let keep = |part: &[usize], n: usize| {
            part[..if n == 0 {
                part.len()
            } else {
                n.min(part.len())
            }]
                .to_vec()
        };
        let test_count = if sizes.test == 0 {
            test_images.len()
        } else {
            sizes.test.min(test_images.len())
        };
        Ok(Self {
            train: train_images.subset(&keep(train, sizes.train))?,
            validation: train_images.subset(&keep(validation, sizes.validation))?,
            test: test_images.subset(&(0..test_count).collect::<Vec<_>>())?,
        })
    }

    /// The same parts with every image replaced by its backbone features `[512]`, the backbone
    /// run once per image, [`FEATURE_CHUNK`] images per call, its product weights made once for
    /// the three parts.
    pub fn features<B: QuenchOps>(
        &self,
        backbone: &ResNet18<B>,
        device: &B::Device,
    ) -> Result<Self, DataError> {
        let mut kept = Inference::default();
        Ok(Self {
            train: features_of(&self.train, backbone, &mut kept, device)?,
            validation: features_of(&self.validation, backbone, &mut kept, device)?,
            test: features_of(&self.test, backbone, &mut kept, device)?,
        })
    }
}

/// The backbone's features of `images` (`[784]` each) on the device, `[images, 512]`,
/// [`FEATURE_CHUNK`] images uploaded per call; the convolutions' product weights taken from
/// `kept` (made at its first use and kept for every later chunk and call).
pub fn backbone_features<B: QuenchOps>(
    images: &Dataset,
    backbone: &ResNet18<B>,
    kept: &mut Inference<B>,
    device: &B::Device,
) -> Result<Tensor<B, 2>, DataError> {
    check_mnist_images(images, "input images")?;
    let chunks = images
        .features()
        .chunks(FEATURE_CHUNK * MNIST_PIXELS)
        .map(|pixels| {
            let count = pixels.len() / MNIST_PIXELS;
            let chunk = float_tensor(pixels.to_vec(), [count, 1, MNIST_SIDE, MNIST_SIDE], device);
            backbone.forward_kept(chunk, kept)
        })
        .collect();
    Ok(Tensor::cat(chunks, 0))
}

/// `images` (`[784]` each) as backbone features (`[512]` each), labels kept; product weights
/// from `kept`, as [`backbone_features`].
pub fn features_of<B: QuenchOps>(
    images: &Dataset,
    backbone: &ResNet18<B>,
    kept: &mut Inference<B>,
    device: &B::Device,
) -> Result<Dataset, DataError> {
    let features = to_host_f32(backbone_features(images, backbone, kept, device)?);
    Dataset::new(features, images.labels().to_vec(), vec![512])
}
