//! The data of a grid: SYNTH with one data set per repetition, or MNIST-binary shared by all
//! chains (Fashion-MNIST classes 0 and 1 where MNIST is absent, and said so).

use std::sync::Arc;

use quench_data::{Dataset, Mnist, MnistSource, Split, Synth, SynthLabels};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use super::{DatasetKind, GridConfig, MNIST_CLASSES, MnistConfig, SgldError, SynthConfig};

/// The two classes of MNIST-binary.
const CLASSES: [u8; MNIST_CLASSES] = [0, 1];

/// Training and test splits for the chains of a grid, labels 0/1, samples flattened.
#[derive(Debug, Clone)]
pub struct GridData {
    /// One training set per repetition, or a single one shared by every chain.
    train: Vec<Arc<Dataset>>,
    /// The test sets, indexed like `train`.
    test: Vec<Arc<Dataset>>,
    /// What the data is and where it came from, for reports.
    pub description: String,
}

impl GridData {
    /// The data `config` asks for: SYNTH is generated, MNIST read from disk.
    pub fn load(config: &GridConfig) -> Result<Self, SgldError> {
        match config.dataset {
            DatasetKind::Synth => Ok(Self::synth(&config.synth, config.repetitions, config.seed)),
            DatasetKind::Mnist => Self::mnist(&config.mnist, config.seed),
        }
    }

    /// SYNTH: repetition `r` is `Synth::generate(seed + r, ...)` (seed 0 gives the workload's
    /// "seeded by r").
    pub fn synth(config: &SynthConfig, repetitions: usize, seed: u64) -> Self {
        let labels = if config.random_labels {
            SynthLabels::Random
        } else {
            SynthLabels::Teacher
        };
        let (train, test) = (0..repetitions)
            .map(|r| {
                let synth = Synth::generate(
                    seed.wrapping_add(r as u64),
                    config.train,
                    config.test,
                    labels,
                );
                (Arc::new(synth.train), Arc::new(synth.test))
            })
            .unzip();
        Self {
            train,
            test,
            description: format!(
                "SYNTH ({} labels): {} training and {} test points per repetition, one data set each",
                if config.random_labels {
                    "random"
                } else {
                    "teacher"
                },
                config.train,
                config.test
            ),
        }
    }

    /// MNIST-binary from the directory `config.dir` or the standard lookup order.
    pub fn mnist(config: &MnistConfig, seed: u64) -> Result<Self, SgldError> {
        let source = MnistSource::locate(config.dir.as_deref())?;
        let train = Mnist::read(source.clone(), Split::Train)?;
        let test = Mnist::read(source, Split::Test)?;
        Self::from_mnist(&train, &test, config, seed)
    }

    /// MNIST-binary from the two splits: `per_class` training images of each of classes 0 and
    /// 1 drawn with `seed`, every test image of those classes; one set shared by all chains.
    pub fn from_mnist(
        train: &Mnist,
        test: &Mnist,
        config: &MnistConfig,
        seed: u64,
    ) -> Result<Self, SgldError> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut picked = Vec::with_capacity(2 * config.per_class);
        for class in CLASSES {
            let mut of_class = indices_of(train, class);
            if of_class.len() < config.per_class {
                return Err(SgldError::Invalid {
                    origin: train.source.to_string(),
                    field: "mnist.per_class",
                    value: config.per_class.to_string(),
                    reason: format!("class {class} has only {} training images", of_class.len()),
                });
            }
            of_class.shuffle(&mut rng);
            picked.extend_from_slice(&of_class[..config.per_class]);
        }
        let test_picked: Vec<usize> = CLASSES.iter().flat_map(|&c| indices_of(test, c)).collect();
        let train_set = binary(train, &picked, config)?;
        let test_set = binary(test, &test_picked, config)?;
        let what = match &train.source {
            MnistSource::Debian(_) => {
                "Fashion-MNIST classes 0/1 (T-shirt/top, trouser) in place of MNIST, which was not found"
            }
            _ => "MNIST digits 0/1",
        };
        Ok(Self {
            description: format!(
                "{what}, from {}: {} training ({} per class) and {} test images, shared by all chains",
                train.source,
                train_set.len(),
                config.per_class,
                test_set.len()
            ),
            train: vec![Arc::new(train_set)],
            test: vec![Arc::new(test_set)],
        })
    }

    /// Whether every chain shares one data set (else one per repetition).
    pub fn shared(&self) -> bool {
        self.train.len() == 1
    }

    /// The training sets of chains of repetitions `repetitions`: one per chain, or the shared
    /// one once (the loader's two ways of taking data).
    pub fn train_sets(&self, repetitions: &[usize]) -> Vec<Arc<Dataset>> {
        Self::sets(&self.train, repetitions)
    }

    /// The test sets of chains of repetitions `repetitions`, like [`Self::train_sets`].
    pub fn test_sets(&self, repetitions: &[usize]) -> Vec<Arc<Dataset>> {
        Self::sets(&self.test, repetitions)
    }

    /// Training points per chain: the `n` of the bound.
    pub fn n_train(&self) -> usize {
        self.train.first().map_or(0, |d| d.len())
    }

    /// Test points per chain.
    pub fn n_test(&self) -> usize {
        self.test.first().map_or(0, |d| d.len())
    }

    /// Features per sample.
    pub fn sample_len(&self) -> usize {
        self.train.first().map_or(0, |d| d.sample_len())
    }

    fn sets(sets: &[Arc<Dataset>], repetitions: &[usize]) -> Vec<Arc<Dataset>> {
        if sets.len() == 1 {
            vec![Arc::clone(&sets[0])]
        } else {
            repetitions.iter().map(|&r| Arc::clone(&sets[r])).collect()
        }
    }
}

/// Indices of the samples of `class`.
fn indices_of(data: &Mnist, class: u8) -> Vec<usize> {
    (0..data.len())
        .filter(|&i| data.labels[i] == class)
        .collect()
}

/// The samples at `indices`, normalised and flattened (labels 0/1 are the classes).
fn binary(data: &Mnist, indices: &[usize], config: &MnistConfig) -> Result<Dataset, SgldError> {
    let subset = data.to_dataset(config.mean, config.std)?.subset(indices)?;
    let len = subset.sample_len();
    Ok(Dataset::new(
        subset.features().to_vec(),
        subset.labels().to_vec(),
        vec![len],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2x2-pixel MNIST-like split whose pixel value is the sample index and whose labels
    /// cycle through `classes`.
    fn fake(len: usize, classes: u8, source: MnistSource) -> Mnist {
        Mnist {
            source,
            split: Split::Train,
            rows: 2,
            cols: 2,
            images: (0..len).flat_map(|i| [i as u8; 4]).collect(),
            labels: (0..len).map(|i| (i % usize::from(classes)) as u8).collect(),
        }
    }

    #[test]
    fn mnist_binary_keeps_two_classes_and_names_fashion_mnist() {
        let config = MnistConfig {
            per_class: 3,
            mean: 0.0,
            std: 1.0 / 255.0,
            ..MnistConfig::default()
        };
        let debian = MnistSource::Debian("/usr/share/datasets/fashion-mnist".into());
        let data = GridData::from_mnist(
            &fake(40, 5, debian.clone()),
            &fake(10, 5, debian),
            &config,
            1,
        )
        .unwrap();
        assert!(data.shared());
        let train = &data.train_sets(&[0, 1, 2])[0];
        assert_eq!(train.len(), 6);
        assert_eq!(train.sample_shape(), &[4]);
        assert_eq!(train.labels().iter().filter(|&&y| y == 1).count(), 3);
        for i in 0..train.len() {
            // The pixel value is the source index, whose class is index mod 5.
            let index = train.sample(i)[0].round() as usize;
            assert_eq!(index % 5, train.labels()[i] as usize);
        }
        assert_eq!(data.test_sets(&[0])[0].len(), 4);
        assert!(
            data.description.contains("Fashion-MNIST"),
            "{}",
            data.description
        );

        let project = MnistSource::Project("data/mnist".into());
        let real = GridData::from_mnist(
            &fake(40, 5, project.clone()),
            &fake(10, 5, project),
            &config,
            1,
        )
        .unwrap();
        assert!(
            real.description.starts_with("MNIST digits"),
            "{}",
            real.description
        );
        let too_many = MnistConfig {
            per_class: 9,
            ..config
        };
        let source = MnistSource::Project("data/mnist".into());
        let err = GridData::from_mnist(
            &fake(40, 5, source.clone()),
            &fake(10, 5, source),
            &too_many,
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("per_class"), "{err}");
    }

    #[test]
    fn synth_gives_each_repetition_its_own_data() {
        let data = GridData::synth(&SynthConfig::default(), 3, 0);
        assert!(!data.shared());
        let sets = data.train_sets(&[2, 0, 2]);
        assert_eq!(sets.len(), 3);
        assert!(Arc::ptr_eq(&sets[0], &sets[2]));
        assert_ne!(sets[0].features(), sets[1].features());
        assert_eq!(
            sets[1].features(),
            Synth::generate(0, 50, 100, SynthLabels::Teacher)
                .train
                .features()
        );
        assert_eq!((data.n_train(), data.sample_len()), (50, 4));
    }
}
