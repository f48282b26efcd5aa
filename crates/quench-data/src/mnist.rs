//! MNIST and Fashion-MNIST (same IDX layout, 10 classes), found by a fixed lookup order.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::idx::{IdxArray, read_idx};
use crate::stand_in::{STAND_IN_SIDE, STAND_IN_TEST, STAND_IN_TRAIN, stand_in_digits};
use crate::{DataError, Dataset};

/// Environment variable naming a directory of MNIST-like IDX files.
pub const MNIST_ENV: &str = "QUENCH_MNIST_DIR";
/// The project's own data directory, relative to the working directory.
pub const PROJECT_MNIST_DIR: &str = "data/mnist";
/// Where Debian's package `dataset-fashion-mnist` installs Fashion-MNIST (gzip'ed IDX).
pub const DEBIAN_FASHION_MNIST_DIR: &str = "/usr/share/datasets/fashion-mnist";
/// Classes of MNIST and Fashion-MNIST.
const CLASSES: u8 = 10;
/// Mean of MNIST's usual pixel normalisation `(p / 255 - mean) / std`.
pub const MNIST_MEAN: f32 = 0.1307;
/// Standard deviation of MNIST's usual pixel normalisation.
pub const MNIST_STD: f32 = 0.3081;
/// The side of an MNIST image, in pixels: the models that read MNIST (the hybrid's backbone,
/// the loader's MLP) take 28 x 28 images.
pub const MNIST_SIDE: usize = 28;
/// The pixels of an MNIST image, [`MNIST_SIDE`] squared: the models' input width.
pub const MNIST_PIXELS: usize = MNIST_SIDE * MNIST_SIDE;

/// Refuses images that are not [`MNIST_SIDE`] x [`MNIST_SIDE`] pixels, as a square or in a
/// row of 784 (a folder of other IDX images: the models read 28 x 28), and an empty set;
/// `part` names them in the message with where they came from (`"test images of <folder>"`).
pub fn check_mnist_images(images: &Dataset, part: &str) -> Result<(), DataError> {
    let shape = images.sample_shape();
    if shape != [MNIST_SIDE, MNIST_SIDE] && shape != [MNIST_PIXELS] {
        return Err(DataError::invalid(
            "sample_shape",
            format!("{shape:?} ({part})"),
            "the models take 28 x 28 images, as MNIST's",
        ));
    }
    if images.is_empty() {
        return Err(DataError::invalid(
            "samples",
            format!("0 ({part})"),
            "every part needs at least one image",
        ));
    }
    Ok(())
}

/// Seeds of the stand-in's two splits: fixed, so every run without data sees the same images.
const STAND_IN_SEEDS: [u64; 2] = [0x5354_414e_4400, 0x5354_414e_4401];

/// Which half of the data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// The 60,000 training samples (`train-*` files).
    Train,
    /// The 10,000 test samples (`t10k-*` files).
    Test,
}

impl Split {
    /// The IDX file names of this split, images first.
    fn files(self) -> [&'static str; 2] {
        match self {
            Split::Train => ["train-images-idx3-ubyte", "train-labels-idx1-ubyte"],
            Split::Test => ["t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"],
        }
    }
}

/// The directory a data set was read from, and why that one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MnistSource {
    /// A path the caller gave.
    Explicit(PathBuf),
    /// The directory in `QUENCH_MNIST_DIR`.
    Env(PathBuf),
    /// The project's `data/mnist/`.
    Project(PathBuf),
    /// Debian's Fashion-MNIST: the data is Fashion-MNIST, not handwritten digits.
    Debian(PathBuf),
    /// No data set was found in these places: the synthetic stand-in for classes 0 and 1
    /// (`stand_in_digits`), 12,000 training and 2,000 test images of 28 x 28.
    StandIn {
        /// The directories searched, in order.
        tried: Vec<PathBuf>,
    },
}

impl MnistSource {
    /// Finds the data set: `explicit` if given, else `$QUENCH_MNIST_DIR` if set, else
    /// `data/mnist/` or Debian's Fashion-MNIST, whichever first holds training images.
    ///
    /// A directory the caller named (argument or variable) is taken as is, so a typo is
    /// reported by [`Mnist::read`] instead of silently falling through to other data.
    pub fn locate(explicit: Option<&Path>) -> Result<Self, DataError> {
        Self::locate_in(
            explicit,
            std::env::var_os(MNIST_ENV),
            Path::new(PROJECT_MNIST_DIR),
            Path::new(DEBIAN_FASHION_MNIST_DIR),
        )
    }

    /// The lookup order of [`MnistSource::locate`], with the environment variable's value
    /// and the two default directories passed in.
    pub fn locate_in(
        explicit: Option<&Path>,
        env: Option<OsString>,
        project: &Path,
        debian: &Path,
    ) -> Result<Self, DataError> {
        if let Some(dir) = explicit {
            return Ok(Self::Explicit(dir.to_path_buf()));
        }
        if let Some(dir) = env.filter(|dir| !dir.is_empty()) {
            return Ok(Self::Env(dir.into()));
        }
        let [train_images, _] = Split::Train.files();
        if find(project, train_images).is_some() {
            return Ok(Self::Project(project.to_path_buf()));
        }
        if find(debian, train_images).is_some() {
            return Ok(Self::Debian(debian.to_path_buf()));
        }
        Err(DataError::MnistNotFound {
            tried: vec![project.to_path_buf(), debian.to_path_buf()],
        })
    }

    /// `found`, or the synthetic stand-in where the lookup found nothing; every other error
    /// (a named directory that cannot be used, say) is kept.
    pub fn or_stand_in(found: Result<Self, DataError>) -> Result<Self, DataError> {
        match found {
            Err(DataError::MnistNotFound { tried }) => Ok(Self::StandIn { tried }),
            other => other,
        }
    }

    /// The directory; `None` for the stand-in.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            Self::Explicit(dir) | Self::Env(dir) | Self::Project(dir) | Self::Debian(dir) => {
                Some(dir)
            }
            Self::StandIn { .. } => None,
        }
    }
}

impl fmt::Display for MnistSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Explicit(dir) => write!(f, "explicit path {}", dir.display()),
            Self::Env(dir) => write!(f, "{MNIST_ENV}={}", dir.display()),
            Self::Project(dir) => write!(f, "project data {}", dir.display()),
            Self::Debian(dir) => write!(f, "Debian Fashion-MNIST {}", dir.display()),
            Self::StandIn { tried } => write!(
                f,
                "the synthetic stand-in (rings and strokes, not MNIST: no MNIST or Fashion-MNIST \
                 in {}; for real data `apt-get install dataset-fashion-mnist` or set {MNIST_ENV})",
                tried
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// `dir/name` if it exists, else `dir/name.gz` if that exists.
fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    [dir.join(name), dir.join(format!("{name}.gz"))]
        .into_iter()
        .find(|path| path.is_file())
}

/// One split of MNIST or Fashion-MNIST: images `[len, rows, cols]` of grey levels 0-255 and
/// labels `[len]` in 0..10.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mnist {
    /// Where it was read from; says whether it is Fashion-MNIST when that is known.
    pub source: MnistSource,
    /// Which split.
    pub split: Split,
    /// Image height in pixels.
    pub rows: usize,
    /// Image width in pixels.
    pub cols: usize,
    /// Pixels `[len, rows, cols]` row-major.
    pub images: Vec<u8>,
    /// Labels `[len]`.
    pub labels: Vec<u8>,
}

impl Mnist {
    /// Locates the data set ([`MnistSource::locate`]) and reads `split` of it; the source used
    /// is in the result and logged.
    pub fn load(explicit: Option<&Path>, split: Split) -> Result<Self, DataError> {
        Self::read(MnistSource::locate(explicit)?, split)
    }

    /// As [`Mnist::load`], but where the lookup finds no data set at all, `split` of the
    /// synthetic stand-in ([`MnistSource::StandIn`]).
    pub fn load_or_stand_in(explicit: Option<&Path>, split: Split) -> Result<Self, DataError> {
        Self::read(
            MnistSource::or_stand_in(MnistSource::locate(explicit))?,
            split,
        )
    }

    /// Reads and validates `split` from `source`'s directory (raw or `.gz` files), or draws
    /// it for the stand-in.
    pub fn read(source: MnistSource, split: Split) -> Result<Self, DataError> {
        crate::loads::loaded(format_args!("{split:?} split of {source}"));
        let Some(dir) = source.dir() else {
            let (len, seed) = match split {
                Split::Train => (STAND_IN_TRAIN, STAND_IN_SEEDS[0]),
                Split::Test => (STAND_IN_TEST, STAND_IN_SEEDS[1]),
            };
            let (images, labels) = stand_in_digits(len, seed);
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(
                || tracing::warn!(%source, "no MNIST-like data set: using the synthetic stand-in"),
            );
            return Ok(Self {
                source,
                split,
                rows: STAND_IN_SIDE,
                cols: STAND_IN_SIDE,
                images,
                labels,
            });
        };
        let [images_name, labels_name] = split.files();
        let path_of = |name: &str| {
            find(dir, name).ok_or_else(|| DataError::MnistMissing {
                origin: source.to_string(),
                file: name.to_owned(),
            })
        };
        let (images, labels) = read_labelled(&path_of(images_name)?, &path_of(labels_name)?)?;
        tracing::info!(%source, ?split, samples = labels.data.len(), "read MNIST-like data");
        Ok(Self {
            source,
            split,
            rows: images.dims[1],
            cols: images.dims[2],
            images: images.data,
            labels: labels.data,
        })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The images as a data set of `[rows, cols]` samples, each pixel `(p / 255 - mean) / std`
    /// (MNIST's usual normalisation is mean 0.1307, std 0.3081); labels are the classes.
    pub fn to_dataset(&self, mean: f32, std: f32) -> Result<Dataset, DataError> {
        if !mean.is_finite() {
            return Err(DataError::invalid("mean", mean, "must be finite"));
        }
        if !(std.is_finite() && std > 0.0) {
            return Err(DataError::invalid(
                "std",
                std,
                "must be finite and positive",
            ));
        }
        let features = self
            .images
            .iter()
            .map(|&p| (f32::from(p) / 255.0 - mean) / std)
            .collect();
        let labels = self.labels.iter().map(|&l| i64::from(l)).collect();
        Dataset::new(features, labels, vec![self.rows, self.cols])
    }
}

/// Reads an image file `[n, rows, cols]` and its label file `[n]`, checking that the counts
/// agree and that every label is a class.
pub(crate) fn read_labelled(
    images_path: &Path,
    labels_path: &Path,
) -> Result<(IdxArray, IdxArray), DataError> {
    let images = read_with_rank(images_path, 3, "3 (images: count, rows, columns)")?;
    let labels = read_with_rank(labels_path, 1, "1 (labels)")?;
    if images.dims[0] != labels.dims[0] {
        return Err(DataError::IdxCount {
            images: images_path.to_path_buf(),
            labels: labels_path.to_path_buf(),
            images_count: images.dims[0],
            labels_count: labels.dims[0],
        });
    }
    if let Some(i) = labels.data.iter().position(|&l| l >= CLASSES) {
        return Err(DataError::IdxLabel {
            path: labels_path.to_path_buf(),
            offset: 8 + i as u64,
            value: labels.data[i],
            classes: CLASSES,
        });
    }
    Ok((images, labels))
}

/// [`read_idx`], requiring `rank` dimensions.
fn read_with_rank(path: &Path, rank: u8, expected: &'static str) -> Result<IdxArray, DataError> {
    let array = read_idx(path)?;
    if array.dims.len() != usize::from(rank) {
        return Err(DataError::IdxRank {
            path: path.to_path_buf(),
            found: array.dims.len() as u8,
            expected,
        });
    }
    Ok(array)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::{Scratch, gzip, idx_bytes};

    /// Writes a tiny MNIST-like split: 3 images of 2 x 2 and their labels.
    fn write_split(scratch: &Scratch, split: Split, compress: bool) {
        let [images, labels] = split.files();
        let images_bytes = idx_bytes(&[3, 2, 2], &[0, 51, 102, 255, 1, 2, 3, 4, 5, 6, 7, 8]);
        let labels_bytes = idx_bytes(&[3], &[7, 0, 9]);
        if compress {
            scratch.write(&format!("{images}.gz"), &gzip(&images_bytes));
            scratch.write(&format!("{labels}.gz"), &gzip(&labels_bytes));
        } else {
            scratch.write(images, &images_bytes);
            scratch.write(labels, &labels_bytes);
        }
    }

    #[test]
    fn an_empty_lookup_gives_the_stand_in_with_mnist_shapes_and_says_so() {
        let empty = Scratch::new();
        let found = MnistSource::locate_in(None, None, empty.dir(), empty.dir());
        let source = MnistSource::or_stand_in(found).unwrap();
        assert!(matches!(source, MnistSource::StandIn { .. }));
        let text = source.to_string();
        assert!(
            text.contains("stand-in") && text.contains("apt-get install"),
            "{text}"
        );
        let train = Mnist::read(source.clone(), Split::Train).unwrap();
        let test = Mnist::read(source, Split::Test).unwrap();
        assert_eq!(
            (train.len(), train.rows, train.cols),
            (STAND_IN_TRAIN, 28, 28)
        );
        assert_eq!(test.len(), STAND_IN_TEST);
        let data = train.to_dataset(MNIST_MEAN, MNIST_STD).unwrap();
        assert_eq!(data.binary(0, 1).unwrap().len(), STAND_IN_TRAIN);
        // A directory that was named is not replaced by the stand-in.
        let named = MnistSource::locate_in(Some(empty.dir()), None, empty.dir(), empty.dir());
        assert!(matches!(
            MnistSource::or_stand_in(named),
            Ok(MnistSource::Explicit(_))
        ));
    }

    #[test]
    fn lookup_order_is_explicit_env_project_debian() {
        let (project, debian, empty) = (Scratch::new(), Scratch::new(), Scratch::new());
        write_split(&project, Split::Train, false);
        write_split(&debian, Split::Train, true);
        let explicit = Path::new("/explicit");
        let env = || Some(OsString::from("/from-env"));
        let locate = |explicit, env, project: &Scratch, debian: &Scratch| {
            MnistSource::locate_in(explicit, env, project.dir(), debian.dir()).unwrap()
        };
        assert_eq!(
            locate(Some(explicit), env(), &project, &debian),
            MnistSource::Explicit(explicit.into())
        );
        assert_eq!(
            locate(None, env(), &project, &debian),
            MnistSource::Env("/from-env".into())
        );
        assert_eq!(
            locate(None, Some(OsString::new()), &project, &debian),
            MnistSource::Project(project.dir().into())
        );
        assert_eq!(
            locate(None, None, &empty, &debian),
            MnistSource::Debian(debian.dir().into())
        );
        let err = MnistSource::locate_in(None, None, empty.dir(), empty.dir()).unwrap_err();
        assert!(matches!(err, DataError::MnistNotFound { .. }));
        assert!(
            err.to_string()
                .contains("apt-get install dataset-fashion-mnist"),
            "{err}"
        );
        assert!(err.to_string().contains("QUENCH_MNIST_DIR"), "{err}");
    }

    #[test]
    fn reads_raw_and_gzip_splits() {
        let scratch = Scratch::new();
        write_split(&scratch, Split::Train, false);
        write_split(&scratch, Split::Test, true);
        let source = MnistSource::Explicit(scratch.dir().into());
        let train = Mnist::read(source.clone(), Split::Train).unwrap();
        let test = Mnist::read(source.clone(), Split::Test).unwrap();
        assert_eq!((train.len(), train.rows, train.cols), (3, 2, 2));
        assert_eq!(train.labels, vec![7, 0, 9]);
        assert_eq!(train.images, test.images);
        assert_eq!(train.source, source);
        let data = train.to_dataset(0.5, 0.25).unwrap();
        assert_eq!(data.sample_shape(), &[2, 2]);
        assert_eq!(data.labels(), &[7, 0, 9]);
        let expected = [0.0f32, 51.0, 102.0, 255.0].map(|p| (p / 255.0 - 0.5) / 0.25);
        assert_eq!(data.sample(0), &expected);
        assert!(train.to_dataset(0.5, 0.0).is_err());
    }

    #[test]
    fn a_named_directory_without_the_files_is_an_error() {
        let scratch = Scratch::new();
        let err = Mnist::read(MnistSource::Env(scratch.dir().into()), Split::Test).unwrap_err();
        assert!(matches!(err, DataError::MnistMissing { .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains(MNIST_ENV) && message.contains("t10k-images-idx3-ubyte"));
    }

    #[test]
    fn checks_counts_labels_and_ranks_across_the_pair() {
        let scratch = Scratch::new();
        let images = scratch.write("i", &idx_bytes(&[2, 1, 1], &[0, 0]));
        let labels = scratch.write("l", &idx_bytes(&[3], &[0, 1, 2]));
        let err = read_labelled(&images, &labels).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::IdxCount {
                    images_count: 2,
                    labels_count: 3,
                    ..
                }
            ),
            "{err}"
        );
        let labels = scratch.write("l", &idx_bytes(&[2], &[3, 10]));
        let err = read_labelled(&images, &labels).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::IdxLabel {
                    offset: 9,
                    value: 10,
                    ..
                }
            ),
            "{err}"
        );
        let err = read_labelled(&labels, &labels).unwrap_err();
        assert!(matches!(err, DataError::IdxRank { found: 1, .. }), "{err}");
    }
}
