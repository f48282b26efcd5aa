//! The one error type of the crate: every failure names the file and the line or byte offset.

use std::path::PathBuf;

use thiserror::Error;

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
    /// A file whose format cannot be told from its first bytes.
    #[error(
        "{}: starts with binary bytes {head}: not text (qRNG bit strings, OHLCV) and not IDX \
         (which starts with two zero bytes, or gzip's 1f 8b); pass --format to say what it is",
        path.display()
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// Its first bytes, in hexadecimal.
        head: String,
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
        "{}: truncated at byte {found}: the header declares {} bytes in all",
        path.display(),
        // Saturated: the dimensions' product passed 2^64, which no file holds.
        if *expected == u64::MAX { "2^64 or more".to_string() } else { expected.to_string() }
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
        /// Where the directory came from, as `MnistSource` describes it.
        origin: String,
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
    /// An OHLCV file holds no bar (nothing, blank lines or a header alone).
    #[error("{}: no bars", path.display())]
    OhlcvEmpty {
        /// The file.
        path: PathBuf,
    },
    /// The header line of an OHLCV file names an unknown or repeated column, or lacks one.
    #[error("{}: line {line}: header {detail}", path.display())]
    OhlcvHeader {
        /// The file.
        path: PathBuf,
        /// The header's line (the first non-blank one).
        line: usize,
        /// What is wrong, naming the column.
        detail: String,
    },
    /// An OHLCV file beyond what the reader takes: a line longer than
    /// [`MAX_OHLCV_LINE`](crate::ohlcv::MAX_OHLCV_LINE) bytes, or more than
    /// [`MAX_BARS`](crate::ohlcv::MAX_BARS) bars.
    #[error("{}: line {line}: {detail}", path.display())]
    OhlcvLimit {
        /// The file.
        path: PathBuf,
        /// The line where the limit was passed.
        line: usize,
        /// Which limit, with its number.
        detail: String,
    },
    /// A line of an OHLCV file has another number of fields than the header or the first line.
    #[error("{}: line {line}: {found} fields, expected {expected}", path.display())]
    OhlcvFieldCount {
        /// The file.
        path: PathBuf,
        /// The line.
        line: usize,
        /// Fields the layout needs.
        expected: usize,
        /// Fields on this line.
        found: usize,
    },
    /// A field of an OHLCV file does not parse (a price that is not a number, a bad date).
    #[error(
        "{}: line {line}, column {column} ({field}): {text:?} is not {expected}",
        path.display()
    )]
    OhlcvSyntax {
        /// The file.
        path: PathBuf,
        /// The line.
        line: usize,
        /// The field's position on the line, from 1.
        column: usize,
        /// The column's name (`open`, `time`, ...).
        field: &'static str,
        /// The field as written (lossily decoded).
        text: String,
        /// What it should be, in words.
        expected: &'static str,
    },
    /// A bar of an OHLCV file is impossible: high below low, open or close outside
    /// `[low, high]`, a price that is not positive and finite, a negative or non-finite volume
    /// or spread.
    #[error(
        "{}: line {line}, column {column} ({field}): {} {reason}",
        path.display(),
        quench_support::numbers::short(*.value)
    )]
    OhlcvValue {
        /// The file.
        path: PathBuf,
        /// The line.
        line: usize,
        /// The field's position on the line, from 1.
        column: usize,
        /// The column's name.
        field: &'static str,
        /// The value.
        value: f64,
        /// Why it is impossible.
        reason: String,
    },
    /// A timestamp of an OHLCV file is not later than the previous bar's.
    #[error(
        "{}: line {line}: time {} is not after line {previous_line}'s {}",
        path.display(), crate::civil::format_utc(*time), crate::civil::format_utc(*previous)
    )]
    OhlcvTimeOrder {
        /// The file.
        path: PathBuf,
        /// The line.
        line: usize,
        /// Its time, unix seconds.
        time: i64,
        /// The line of the previous bar.
        previous_line: usize,
        /// The previous bar's time, unix seconds.
        previous: i64,
    },
    /// The columns of in-memory bars differ in length.
    #[error("bars of {symbol}: column {field} has {len} values, but close has {expected}")]
    BarColumns {
        /// The symbol.
        symbol: String,
        /// The column that differs.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The number of closes.
        expected: usize,
    },
    /// An in-memory bar is impossible (the checks of [`DataError::OhlcvValue`]) or not later
    /// than the bar before it.
    #[error("bars of {symbol}: bar {bar} ({field}): {value} {reason}")]
    BarInvalid {
        /// The symbol.
        symbol: String,
        /// The bar's index, from 0.
        bar: usize,
        /// The column's name.
        field: &'static str,
        /// The value.
        value: String,
        /// Why it is impossible.
        reason: String,
    },
    /// A feature of a bar is not a finite f32 (before or after normalisation): prices or a
    /// spread beyond f32's range, which would train on NaN.
    #[error(
        "bars of {symbol}: bar {bar} (time {time}): feature {feature} is {value}{stage}; \
         prices, spread or volume beyond f32's range?"
    )]
    NonFiniteFeature {
        /// The symbol (the file stem for a file that was read).
        symbol: String,
        /// The bar's index, from 0.
        bar: usize,
        /// The bar's opening time, unix seconds.
        time: i64,
        /// The feature's name ([`crate::FEATURES`]).
        feature: &'static str,
        /// The value computed.
        value: f32,
        /// Empty, or where it was found (" after normalisation").
        stage: &'static str,
    },
    /// A part of the direction-classifier data has no window: the symbols are too short for
    /// the window, the horizon, the feature history and the split fractions.
    #[error(
        "the {part} part has no window: {symbols} symbol(s), the longest with {longest} bars; \
         one window in every part needs at least {needed} bars of a symbol"
    )]
    MarketPartEmpty {
        /// `train`, `validation` or `test`.
        part: &'static str,
        /// Number of symbols given.
        symbols: usize,
        /// Bars of the longest symbol.
        longest: usize,
        /// Bars one symbol needs for a window in every part.
        needed: usize,
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
    /// A data set would need more memory than the host has.
    #[error(transparent)]
    TooLarge(#[from] quench_support::budget::TooLarge),
    /// The operating system refused a loader thread.
    #[error("cannot start a loader thread: {0}")]
    Spawn(#[source] std::io::Error),
}

/// A field of a file as a message quotes it: lossily decoded (a field cut from binary is not
/// text), then shown by its ends when long ([`quench_support::excerpt`]), so that a one-line
/// file of 50 MB is not echoed whole.
pub(crate) fn excerpt(field: &[u8]) -> String {
    quench_support::excerpt::excerpt(&String::from_utf8_lossy(field)).into_owned()
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
