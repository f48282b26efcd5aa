//! The readers and the loader on Debian's Fashion-MNIST (`apt-get install
//! dataset-fashion-mnist`, which CI does). Where it is not installed, each test says so and
//! checks nothing.

use quench_kernels::reductions::Reduce;
use std::path::Path;
use std::sync::Arc;

use crate::{
    DEBIAN_FASHION_MNIST_DIR, Format, Loader, LoaderConfig, Mnist, MnistSource, Mode, Split,
    summary,
};
use burn::backend::NdArray;

/// Debian's Fashion-MNIST, if installed.
fn debian() -> Option<MnistSource> {
    let dir = Path::new(DEBIAN_FASHION_MNIST_DIR);
    if dir.is_dir() {
        Some(MnistSource::Debian(dir.to_path_buf()))
    } else {
        eprintln!(
            "skipped: {DEBIAN_FASHION_MNIST_DIR} is absent (apt-get install dataset-fashion-mnist)"
        );
        None
    }
}

/// How many samples of each of the 10 classes `labels` holds.
fn class_counts(labels: impl IntoIterator<Item = i64>) -> [usize; 10] {
    let mut counts = [0; 10];
    for label in labels {
        counts[usize::try_from(label).unwrap()] += 1;
    }
    counts
}

#[test]
fn reads_both_splits_balanced() {
    let Some(source) = debian() else { return };
    for (split, len) in [(Split::Train, 60_000), (Split::Test, 10_000)] {
        let mnist = Mnist::read(source.clone(), split).unwrap();
        assert_eq!((mnist.len(), mnist.rows, mnist.cols), (len, 28, 28));
        assert_eq!(mnist.images.len(), len * 28 * 28);
        assert_eq!(mnist.source, source);
        let counts = class_counts(mnist.labels.iter().map(|&l| i64::from(l)));
        assert_eq!(counts, [len / 10; 10]);
        // Fashion-MNIST's published mean grey level is 0.286 (MNIST's 0.131).
        let mean = mnist.images.iter().map(|&p| f64::from(p)).sum::<f64>() / (len * 784) as f64;
        assert!(
            (mean / 255.0 - 0.286).abs() < 0.005,
            "mean {}",
            mean / 255.0
        );
    }
}

#[test]
fn summarises_the_gzip_image_file_with_its_labels() {
    let Some(source) = debian() else { return };
    let images = source.dir().unwrap().join("t10k-images-idx3-ubyte.gz");
    let summary = summary(&images, None).unwrap();
    assert_eq!(summary.format, Format::Idx);
    assert_eq!(summary.shape, vec![10_000, 28, 28]);
    assert_eq!(
        summary.labels_from,
        Some(source.dir().unwrap().join("t10k-labels-idx1-ubyte.gz"))
    );
    let counts: Vec<_> = summary.classes.iter().map(|c| (c.label, c.count)).collect();
    assert_eq!(counts, (0..10).map(|l| (l, 1000)).collect::<Vec<_>>());
}

#[test]
fn an_epoch_through_two_workers_serves_the_whole_test_split() {
    let Some(source) = debian() else { return };
    let data = Mnist::read(source, Split::Test)
        .unwrap()
        .to_dataset(0.2860, 0.3530)
        .unwrap();
    let config = LoaderConfig {
        batch_size: 1000,
        shuffle: true,
        drop_last: false,
        mode: Mode::Streaming {
            num_workers: 2,
            prefetch: 2,
            staging: true,
        },
    };
    let mut loader =
        Loader::<NdArray<f32>>::new(vec![Arc::new(data)], &[0], &config, &Default::default())
            .unwrap();
    let mut labels = Vec::new();
    let mut sum = 0.0f64;
    for batch in loader.epoch(0) {
        assert_eq!(batch.features.dims(), [1, 1000, 784]);
        sum += f64::from(batch.features.sum_all().into_scalar());
        labels.extend(batch.labels.into_data().to_vec::<i64>().unwrap());
    }
    assert_eq!(class_counts(labels), [1000; 10]);
    // Normalised with the data's own mean, the features average about zero.
    assert!(
        (sum / (10_000.0 * 784.0)).abs() < 0.02,
        "mean {}",
        sum / 7.84e6
    );
}
