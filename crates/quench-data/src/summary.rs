//! Validate a data file and describe it: what `benchmark data FILE` prints.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Serialize;

use crate::civil::format_utc;
use crate::idx::{is_gzip, read_idx};
use crate::mnist::read_labelled;
use crate::qrng::{BitStrings, QRNG_LABELS};
use crate::{Bars, DataError, Gap, WindowConfig};

/// A data file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// IDX (MNIST-like), raw or gzip'ed.
    Idx,
    /// qRNG bit strings, `<bits> <label>` per line.
    Qrng,
    /// OHLCV bars of one symbol ([`Bars::read`]); never detected, it must be asked for.
    Ohlcv,
}

impl Format {
    /// Guesses the format from the first bytes of `path`: gzip or two zero bytes mean IDX,
    /// text is read as bit strings (OHLCV is never guessed: a tab-separated file may be
    /// either), and anything else is refused with the bytes it starts with.
    pub fn detect(path: &Path) -> Result<Self, DataError> {
        let io = |source| DataError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut head = Vec::with_capacity(64);
        // A FIFO or device is refused, not read until it ends.
        quench_support::files::open_regular(path)
            .map_err(io)?
            .take(64)
            .read_to_end(&mut head)
            .map_err(io)?;
        if is_gzip(&head) || head.starts_with(&[0, 0]) {
            return Ok(Self::Idx);
        }
        if looks_like_text(&head) {
            return Ok(Self::Qrng);
        }
        Err(DataError::UnknownFormat {
            path: path.to_path_buf(),
            head: head
                .iter()
                .take(8)
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" "),
        })
    }
}

/// Whether `head`, the first bytes of a file, is UTF-8 text (a character cut at the end
/// allowed) without control characters other than whitespace.
fn looks_like_text(head: &[u8]) -> bool {
    let valid = match std::str::from_utf8(head) {
        Ok(text) => text,
        // Cut inside a character at the end of the sample: the part before it.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return false,
    };
    !valid.chars().any(|c| c.is_control() && !c.is_whitespace())
}

impl FromStr for Format {
    type Err = DataError;

    /// `idx`, `qrng` or `ohlcv`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "idx" => Ok(Self::Idx),
            "qrng" => Ok(Self::Qrng),
            "ohlcv" => Ok(Self::Ohlcv),
            _ => Err(DataError::invalid(
                "format",
                s,
                "must be `idx`, `qrng` or `ohlcv`",
            )),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Idx => "idx",
            Self::Qrng => "qrng",
            Self::Ohlcv => "ohlcv",
        })
    }
}

/// What a validated data file holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The file.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// Its array shape: `[lines, bits]` for bit strings, `[bars, 8]` for OHLCV (time and seven
    /// values per bar), the IDX dimensions otherwise.
    pub shape: Vec<usize>,
    /// The IDX label file counted for an image file (the `labels-idx1` file beside it).
    pub labels_from: Option<PathBuf>,
    /// One entry per label, in ascending order (qRNG: the declared labels, present or not;
    /// OHLCV: the direction labels 0 down, 1 flat, 2 up of every bar with a close
    /// [`WindowConfig::default`]'s horizon ahead, present or not). Empty for an IDX image file
    /// without a label file beside it.
    pub classes: Vec<ClassSummary>,
    /// OHLCV only: the steps longer than the file's most common one, in time order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<Gap>,
}

/// Count and statistics of one label.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassSummary {
    /// The label.
    pub label: u32,
    /// Samples (lines, images) with it.
    pub count: usize,
    /// qRNG only: the fraction of ones among the bits of its lines.
    pub mean_bit: Option<f64>,
}

/// Validates the file at `path` as `format` (detected when `None`) and summarises it.
///
/// qRNG labels must be [`QRNG_LABELS`]. An IDX image file whose name contains `images-idx3`
/// is checked against the `labels-idx1` file beside it, if there is one, and its labels are
/// counted; any other IDX file of rank 1 has its values counted as labels.
pub fn summary(path: &Path, format: Option<Format>) -> Result<Summary, DataError> {
    let format = match format {
        Some(format) => format,
        None => Format::detect(path)?,
    };
    match format {
        Format::Qrng => qrng_summary(path),
        Format::Idx => idx_summary(path),
        Format::Ohlcv => ohlcv_summary(path),
    }
}

fn ohlcv_summary(path: &Path) -> Result<Summary, DataError> {
    let file = Bars::read(path)?;
    let close = &file.bars.close;
    let labels = WindowConfig::default();
    let mut counts = [0usize; 3];
    for t in 0..close.len().saturating_sub(labels.horizon) {
        counts[labels.label(close[t], close[t + labels.horizon]) as usize] += 1;
    }
    Ok(Summary {
        path: path.to_path_buf(),
        format: Format::Ohlcv,
        shape: vec![file.bars.len(), 8],
        labels_from: None,
        classes: (0..)
            .zip(counts)
            .map(|(label, count)| ClassSummary {
                label,
                count,
                mean_bit: None,
            })
            .collect(),
        gaps: file.gaps,
    })
}

fn qrng_summary(path: &Path) -> Result<Summary, DataError> {
    let strings = BitStrings::read(path, &QRNG_LABELS)?;
    let classes = strings
        .classes()
        .iter()
        .map(|&label| ClassSummary {
            label,
            count: strings.labels().iter().filter(|&&l| l == label).count(),
            mean_bit: strings.mean_bit(label),
        })
        .collect();
    Ok(Summary {
        path: path.to_path_buf(),
        format: Format::Qrng,
        shape: vec![strings.len(), strings.bits_per_line()],
        labels_from: None,
        classes,
        gaps: Vec::new(),
    })
}

fn idx_summary(path: &Path) -> Result<Summary, DataError> {
    let sibling = labels_beside(path);
    let (shape, labels) = match &sibling {
        Some(labels_path) => {
            let (images, labels) = read_labelled(path, labels_path)?;
            (images.dims, Some(labels.data))
        }
        None => {
            let array = read_idx(path)?;
            let labels = (array.dims.len() == 1).then_some(array.data);
            (array.dims, labels)
        }
    };
    let mut counts = BTreeMap::new();
    for label in labels.iter().flatten() {
        *counts.entry(u32::from(*label)).or_insert(0) += 1;
    }
    Ok(Summary {
        path: path.to_path_buf(),
        format: Format::Idx,
        shape,
        labels_from: sibling,
        gaps: Vec::new(),
        classes: counts
            .into_iter()
            .map(|(label, count)| ClassSummary {
                label,
                count,
                mean_bit: None,
            })
            .collect(),
    })
}

/// The label file that MNIST's naming puts beside image file `path`, if it exists.
fn labels_beside(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let labels = path.with_file_name(name.replace("images-idx3", "labels-idx1"));
    (name.contains("images-idx3") && labels.is_file()).then_some(labels)
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.format {
            Format::Idx => "IDX",
            Format::Qrng => "qRNG bit strings",
            Format::Ohlcv => "OHLCV bars",
        };
        writeln!(f, "{}: {kind}, shape {:?}", self.path.display(), self.shape)?;
        if let Some(labels) = &self.labels_from {
            writeln!(f, "labels from {}", labels.display())?;
        }
        if self.format == Format::Ohlcv {
            let labels = WindowConfig::default();
            writeln!(
                f,
                "direction over the next {} bars, threshold {} %: label 0 down, 1 flat, 2 up",
                labels.horizon,
                labels.threshold * 100.0
            )?;
        }
        for class in &self.classes {
            write!(f, "  label {:>3}: {:>6}", class.label, class.count)?;
            if let Some(mean) = class.mean_bit {
                write!(f, "  mean bit frequency {mean:.4}")?;
            }
            writeln!(f)?;
        }
        if self.format == Format::Ohlcv {
            let missing: usize = self.gaps.iter().map(|gap| gap.missing).sum();
            match self.gaps.iter().max_by_key(|gap| gap.missing) {
                None => writeln!(f, "gaps: none")?,
                Some(largest) => writeln!(
                    f,
                    "gaps: {} ({missing} missing bars), the largest at line {}: {} to {}, {} \
                     missing bars",
                    self.gaps.len(),
                    largest.line,
                    format_utc(largest.from),
                    format_utc(largest.to),
                    largest.missing
                )?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::{Scratch, gzip, idx_bytes};

    #[test]
    fn format_is_detected_from_the_first_bytes() {
        let scratch = Scratch::new();
        let idx = idx_bytes(&[1], &[4]);
        assert_eq!(
            Format::detect(&scratch.write("a", &idx)).unwrap(),
            Format::Idx
        );
        assert_eq!(
            Format::detect(&scratch.write("b", &gzip(&idx))).unwrap(),
            Format::Idx
        );
        assert_eq!(
            Format::detect(&scratch.write("c", b"01 1\n")).unwrap(),
            Format::Qrng
        );
        assert!(Format::detect(&scratch.dir().join("absent")).is_err());
        // An IDX file with a broken magic number is binary, not bit strings: refused with the
        // bytes it starts with.
        let mut broken = idx.clone();
        broken[0] = 1;
        let err = Format::detect(&scratch.write("e", &broken))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("01 00 08 01") && err.contains("--format"),
            "{err}"
        );
        // Text cut inside a character at the 64-byte sample's end is still text.
        let mut accented = vec![b'0'; 63];
        accented.extend("é 1\n".as_bytes());
        assert_eq!(
            Format::detect(&scratch.write("f", &accented)).unwrap(),
            Format::Qrng
        );
        assert_eq!("qrng".parse::<Format>().unwrap(), Format::Qrng);
        assert_eq!("ohlcv".parse::<Format>().unwrap(), Format::Ohlcv);
        assert!("csv".parse::<Format>().is_err());
        // Bars are never guessed: a tab-separated export reads as (bad) bit strings.
        assert_eq!(
            Format::detect(&scratch.write("d", b"1704067200\t1\t1\t1\t1\t0\t0\t0\n")).unwrap(),
            Format::Qrng
        );
    }

    #[test]
    fn summarises_the_vendored_qrng_file() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../data/qrng/AI_2qubits_training_data.txt");
        let summary = summary(&path, None).unwrap();
        assert_eq!(
            (summary.format, summary.shape.as_slice()),
            (Format::Qrng, &[6000, 100][..])
        );
        assert_eq!(
            summary.classes.iter().map(|c| c.label).collect::<Vec<_>>(),
            QRNG_LABELS
        );
        for class in &summary.classes {
            assert_eq!(class.count, 2000);
            let mean = class.mean_bit.unwrap();
            assert!((0.3..0.7).contains(&mean), "{mean}");
        }
        let text = summary.to_string();
        assert!(
            text.contains("shape [6000, 100]") && text.contains("mean bit frequency"),
            "{text}"
        );
    }

    #[test]
    fn counts_labels_of_an_image_file_from_the_file_beside_it() {
        let scratch = Scratch::new();
        let images = scratch.write(
            "x-images-idx3-ubyte.gz",
            &gzip(&idx_bytes(&[3, 1, 2], &[0; 6])),
        );
        let labels = scratch.write(
            "x-labels-idx1-ubyte.gz",
            &gzip(&idx_bytes(&[3], &[4, 1, 4])),
        );
        let summary = summary(&images, Some(Format::Idx)).unwrap();
        assert_eq!(summary.shape, vec![3, 1, 2]);
        assert_eq!(summary.labels_from, Some(labels.clone()));
        let counts: Vec<_> = summary.classes.iter().map(|c| (c.label, c.count)).collect();
        assert_eq!(counts, vec![(1, 1), (4, 2)]);
        let direct = super::summary(&labels, None).unwrap();
        assert_eq!(
            (direct.shape.as_slice(), direct.classes.len()),
            (&[3][..], 2)
        );
        let alone = scratch.write("lone-idx3-ubyte", &idx_bytes(&[1, 1, 1], &[0]));
        assert!(super::summary(&alone, None).unwrap().classes.is_empty());
    }

    #[test]
    fn a_bad_file_fails_with_the_readers_error() {
        let scratch = Scratch::new();
        let path = scratch.write("bad.txt", b"0101 1\n0121 2\n");
        assert!(matches!(
            summary(&path, None),
            Err(DataError::QrngBit { line: 2, .. })
        ));
        assert!(matches!(
            summary(&path, Some(Format::Idx)),
            Err(DataError::IdxMagic { .. })
        ));
    }

    #[test]
    fn summarises_ohlcv_bars_with_direction_labels_and_gaps() {
        let scratch = Scratch::new();
        // 12 bars, 15 minutes apart, with 2 bars missing before the 11th; the close rises
        // 1 % a bar for six bars, then stays.
        let mut text = String::from("time,open,high,low,close,tick_volume,spread,real_volume\n");
        let mut close = 1.0f64;
        for i in 0..12i64 {
            let time = 1_704_067_200 + 900 * (i + if i >= 10 { 2 } else { 0 });
            let open = close;
            if i < 6 {
                close *= 1.01;
            }
            text += &format!("{time},{open},{close},{open},{close},10,3,0\n");
        }
        let path = scratch.write("EURUSD.csv", text.as_bytes());
        assert!(matches!(
            summary(&path, None),
            Err(DataError::QrngSyntax { .. })
        ));
        let summary = summary(&path, Some(Format::Ohlcv)).unwrap();
        assert_eq!(summary.shape, vec![12, 8]);
        // Bars 0 to 3 have a close 8 bars ahead, rises of 5.1, 4.1, 3.0 and 2.0 %: all up.
        let counts: Vec<_> = summary.classes.iter().map(|c| (c.label, c.count)).collect();
        assert_eq!(counts, vec![(0, 0), (1, 0), (2, 4)]);
        assert_eq!(
            summary.gaps,
            vec![Gap {
                line: 12,
                from: 1_704_067_200 + 900 * 9,
                to: 1_704_067_200 + 900 * 12,
                missing: 2
            }]
        );
        let text = summary.to_string();
        for needle in [
            "EURUSD.csv: OHLCV bars, shape [12, 8]",
            "label 0 down, 1 flat, 2 up",
            "label   2:      4",
            "gaps: 1 (2 missing bars), the largest at line 12: 2024-01-01 02:15:00 to \
             2024-01-01 03:00:00, 2 missing bars",
        ] {
            assert!(text.contains(needle), "{needle:?} in {text}");
        }
    }

    #[test]
    fn other_formats_print_no_gaps() {
        let scratch = Scratch::new();
        let path = scratch.write("bits.txt", b"01 1\n");
        let text = summary(&path, None).unwrap().to_string();
        assert!(!text.contains("gaps"), "{text}");
    }
}
