//! The one error type of the crate: every failure names the file and the line or byte offset.

use std::path::PathBuf;

use thiserror::Error;

use crate::mnist::MnistSource;

/// A failure to read, validate, generate or load data.
///
/// Byte offsets of IDX files count from the start of the decompressed stream, so they are the
/// same for a raw file and its gzip'ed twin. Line and column numbers start at 1.
#[derive(Debug, Error)]
pub enum DataError {
    /// The file could not be opened or read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file starts like gzip but does not decompress.
    #[error("{}: corrupt gzip stream: {source}", path.display())]
    Gzip {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        source: std::io::Error,
    },
    /// The first two bytes of an IDX file are not zero.
    #[error(
        "{}: byte 0: not an IDX file: the magic number must start with two zero bytes, found {:#04x} {:#04x}",
        path.display(), found[0], found[1]
    )]
    IdxMagic {
        /// The file.
        path: PathBuf,
        /// The first two bytes.
        found: [u8; 2],
    },
    /// The element type (byte 2 of the magic number) is not unsigned byte, the type of MNIST.
    #[error(
        "{}: byte 2: IDX element type {found:#04x} is not supported, only unsigned bytes (0x08)",
        path.display()
    )]
    IdxElementType {
        /// The file.
        path: PathBuf,
        /// The element-type byte.
        found: u8,
    },
    /// The number of dimensions (byte 3 of the magic number) is not the one required.
    #[error("{}: byte 3: IDX array has {found} dimensions, expected {expected}", path.display())]
    IdxRank {
        /// The file.
        path: PathBuf,
        /// The rank in the file.
        found: u8,
        /// What the reader needs, in words.
        expected: &'static str,
    },
    /// The file ends before the header or the data it declares.
    #[error(
        "{}: truncated at byte {found}: the header declares {expected} bytes in all",
        path.display()
    )]
    IdxTruncated {
        /// The file.
        path: PathBuf,
        /// Bytes the header declares (header included), saturated at `u64::MAX`.
        expected: u64,
        /// Bytes present, which is also the offset where the data stops.
        found: u64,
    },
    /// Bytes follow the data the header declares.
    #[error("{}: byte {offset}: {extra} bytes after the declared data", path.display())]
    IdxTrailing {
        /// The file.
        path: PathBuf,
        /// Where the declared data ends.
        offset: u64,
        /// How many bytes follow.
        extra: u64,
    },
    /// An image file and its label file declare different numbers of samples (byte 4 of each).
    #[error(
        "{}: byte 4: {labels_count} labels, but {} (byte 4) declares {images_count} images",
        labels.display(), images.display()
    )]
    IdxCount {
        /// The image file.
        images: PathBuf,
        /// The label file.
        labels: PathBuf,
        /// Images declared.
        images_count: usize,
        /// Labels declared.
        labels_count: usize,
    },
    /// A label byte is not a class of the data set.
    #[error("{}: byte {offset}: label {value} is outside 0..{classes}", path.display())]
    IdxLabel {
        /// The label file.
        path: PathBuf,
        /// Offset of the label byte.
        offset: u64,
        /// The label.
        value: u8,
        /// Number of classes.
        classes: u8,
    },
    /// A bit-string file holds no line.
    #[error("{}: no bit strings", path.display())]
    QrngEmpty {
        /// The file.
        path: PathBuf,
    },
    /// A line is not `<bits> <label>`.
    #[error("{}: line {line}: expected `<bits> <label>`", path.display())]
    QrngSyntax {
        /// The file.
        path: PathBuf,
        /// The line.
        line: usize,
    },
    /// A line's bit string differs in length from the first line's.
    #[error("{}: line {line}: {found} bits, but line 1 has {expected}", path.display())]
    QrngLength {
        /// The file.
        path: PathBuf,
        /// The line.
        line: usize,
        /// Bits on line 1.
        expected: usize,
        /// Bits on this line.
        found: usize,
    },
    /// A character of a bit string is neither `0` nor `1`.
    #[error("{}: line {line}, column {column}: {found:?} is not a bit (0 or 1)", path.display())]
    QrngBit {
        /// The file.
        path: PathBuf,
        /// The line.
        line: usize,
        /// The column, counting bytes.
        column: usize,
        /// The offending character (lossily decoded).
        found: String,
    },
    /// A label is not in the declared set.
    #[error("{}: line {line}: label {label:?} is not one of {allowed:?}", path.display())]
    QrngLabel {
        /// The file.
        path: PathBuf,
        /// The line.
        line: usize,
        /// The label as written.
        label: String,
        /// The declared labels.
        allowed: Vec<u32>,
    },
    /// A data directory named explicitly (argument or `QUENCH_MNIST_DIR`) lacks a file.
    #[error("{origin}: neither {file} nor {file}.gz is there")]
    MnistMissing {
        /// Where the directory came from.
        origin: MnistSource,
        /// The IDX file name looked for.
        file: String,
    },
    /// No MNIST-like data set in any place of the lookup order.
    #[error(
        "no MNIST or Fashion-MNIST data found (looked in {}); install Fashion-MNIST with \
         `apt-get install dataset-fashion-mnist`, or set QUENCH_MNIST_DIR to a directory holding \
         train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and \
         t10k-labels-idx1-ubyte (each may be .gz)",
        tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    MnistNotFound {
        /// The directories searched, in order.
        tried: Vec<PathBuf>,
    },
    /// A parameter of a data set, generator or loader is out of its range.
    #[error("{field} = {value}: {reason}")]
    Invalid {
        /// The parameter.
        field: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        reason: &'static str,
    },
    /// The operating system refused a loader thread.
    #[error("cannot start a loader thread: {0}")]
    Spawn(#[source] std::io::Error),
}

impl DataError {
    /// Shorthand for [`DataError::Invalid`].
    pub(crate) fn invalid(field: &'static str, value: impl ToString, reason: &'static str) -> Self {
        Self::Invalid {
            field,
            value: value.to_string(),
            reason,
        }
    }
}
