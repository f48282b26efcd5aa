//! What a hybrid run is given besides its training settings: which Fashion-MNIST images (or
//! their stand-in) and how many, and the frozen backbone (a random ResNet18 whose batch norms
//! are calibrated on training images, or torchvision-format weights). The benchmark's `hybrid`
//! workload and the Python package read the same settings.

use std::path::PathBuf;

use burn::tensor::{Tensor, TensorData};
use quench_data::{
    MNIST_MEAN, MNIST_PIXELS, MNIST_SIDE, MNIST_STD, Mnist, MnistSource, Split, check_mnist_images,
};
use quench_kernels::QuenchOps;
use serde::{Deserialize, Serialize};

use crate::resnet::{ResNet18, check_weights};
use crate::{HybridData, HybridError, Sizes};

/// The images and the backbone of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HybridSetup {
    /// Samples of each part; 0 keeps the original's 54,000 / 6,000 / 10,000.
    pub train_samples: usize,
    /// See `train_samples`.
    pub validation_samples: usize,
    /// See `train_samples`.
    pub test_samples: usize,
    /// Seed of the train/validation split (the original: 42).
    pub split_seed: u64,
    /// Seed of the random frozen backbone.
    pub backbone_seed: u64,
    /// Images whose statistics calibrate the random backbone's batch norms.
    pub calibration_images: usize,
    /// torchvision-format ResNet18 weights (1-channel conv1) to load instead of the random
    /// backbone.
    pub backbone_weights: Option<PathBuf>,
}

impl Default for HybridSetup {
    fn default() -> Self {
        Self {
            train_samples: 0,
            validation_samples: 0,
            test_samples: 0,
            split_seed: 42,
            backbone_seed: 7,
            calibration_images: 512,
            backbone_weights: None,
        }
    }
}

/// The images of a run, split, and the backbone's part in it.
#[derive(Debug, Clone)]
pub struct HybridImages {
    /// The images, split.
    pub data: HybridData,
    /// Where they came from (`$QUENCH_MNIST_DIR`, a system folder, or the stand-in).
    pub source: MnistSource,
    /// Training images the random backbone is calibrated on (none with a weight file).
    pub calibration: usize,
}

impl HybridSetup {
    /// Reads and splits the images (Fashion-MNIST where one is found, else the stand-in
    /// data) and checks the backbone's part: the weight file readable with a one-channel
    /// `conv1`, or at least one training image to calibrate on.
    pub fn images(&self) -> Result<HybridImages, HybridError> {
        let source = MnistSource::or_stand_in(MnistSource::locate(None))?;
        let images = |split| -> Result<_, HybridError> {
            Ok(Mnist::read(source.clone(), split)?.to_dataset(MNIST_MEAN, MNIST_STD)?)
        };
        let sizes = Sizes {
            train: self.train_samples,
            validation: self.validation_samples,
            test: self.test_samples,
        };
        let (train_images, test_images) = (images(Split::Train)?, images(Split::Test)?);
        // Before anything is cut from them: the backbone and the calibration read 28 x 28.
        check_mnist_images(&train_images, &format!("training images of {source}"))?;
        check_mnist_images(&test_images, &format!("test images of {source}"))?;
        // The original's split: 90 % of the training images train, the rest validate.
        let train_part = train_images.len() * 9 / 10;
        for (name, asked, held) in [
            ("train_samples", sizes.train, train_part),
            (
                "validation_samples",
                sizes.validation,
                train_images.len() - train_part,
            ),
            ("test_samples", sizes.test, test_images.len()),
        ] {
            if held == 0 {
                return Err(HybridError::InvalidValue {
                    name,
                    value: format!("{asked} (the part holds no image)"),
                    reason: "every part needs images: the files hold too few",
                });
            }
            if asked > held {
                return Err(HybridError::InvalidValue {
                    name,
                    value: format!("{asked} (the part holds {held} images)"),
                    reason: "at most the part's images; 0 keeps them all",
                });
            }
        }
        let data = HybridData::split(&train_images, &test_images, sizes, self.split_seed)?;
        let calibration = match &self.backbone_weights {
            Some(path) => {
                check_weights(path)?;
                0
            }
            None => {
                let count = self.calibration_images.min(data.train.len());
                if count == 0 {
                    return Err(HybridError::InvalidValue {
                        name: "calibration_images",
                        value: self.calibration_images.to_string(),
                        reason: "the random backbone needs at least one training image to \
                                 calibrate on",
                    });
                }
                count
            }
        };
        Ok(HybridImages {
            data,
            source,
            calibration,
        })
    }

    /// The frozen backbone for `images` on `device`, and a line saying which it is.
    pub fn backbone<B: QuenchOps>(
        &self,
        images: &HybridImages,
        device: &B::Device,
    ) -> Result<(ResNet18<B>, String), HybridError> {
        if let Some(path) = &self.backbone_weights {
            return Ok((
                ResNet18::<B>::load(path, device)?,
                format!("backbone: ResNet18 weights from {}", path.display()),
            ));
        }
        let count = images.calibration;
        let pixels = images.data.train.features()[..count * MNIST_PIXELS].to_vec();
        let calibration = Tensor::from_data(
            TensorData::new(pixels, [count, 1, MNIST_SIDE, MNIST_SIDE]),
            device,
        );
        Ok((
            ResNet18::<B>::random(device, self.backbone_seed).calibrate(calibration),
            format!(
                "backbone: random frozen ResNet18 (seed {}), batch norms calibrated on {count} \
                 training images (ImageNet weights cannot be downloaded here, and the \
                 original's 1-channel conv1 is random anyway)",
                self.backbone_seed
            ),
        ))
    }
}
