//! The qRNG bit-string format: one `<bits> <label>` per line.

use std::path::Path;

use crate::{DataError, Dataset};

/// Labels of `data/qrng/AI_2qubits_training_data.txt`: its three random-number sources.
pub const QRNG_LABELS: [u32; 3] = [1, 2, 3];

/// The UTF-8 encoding of U+FEFF, the byte-order mark some editors write first.
pub(crate) const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Labelled bit strings of equal length: bits `[len, bits_per_line]`, each 0 or 1, and one
/// label per line from a declared set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitStrings {
    bits: Vec<u8>,
    labels: Vec<u32>,
    bits_per_line: usize,
    classes: Vec<u32>,
}

impl BitStrings {
    /// Reads and validates the file at `path`; `classes` is the declared label set.
    ///
    /// Every line must be a string of `0`/`1` and a label separated by white space, every
    /// string as long as the first line's, every label in `classes`; a final newline and
    /// `\r\n` endings are accepted, blank lines are not. A UTF-8 byte-order mark (`EF BB BF`)
    /// at the start of the file is skipped, so such a file reads exactly like the same file
    /// without it (columns in errors count from after the mark).
    pub fn read(path: &Path, classes: &[u32]) -> Result<Self, DataError> {
        crate::loads::loaded(format_args!("bit strings of {}", path.display()));
        let text = quench_support::files::read_bounded(path, quench_support::files::DATA_LIMIT)
            .map_err(|source| DataError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        // Editors on Windows save "UTF-8" with a byte-order mark; it is not part of the first
        // bit string.
        let text = text.strip_prefix(UTF8_BOM).unwrap_or(&text);
        let body = text.strip_suffix(b"\n").unwrap_or(text);
        if body.is_empty() {
            return Err(DataError::QrngEmpty {
                path: path.to_path_buf(),
            });
        }
        let mut strings = Self {
            bits: Vec::new(),
            labels: Vec::new(),
            bits_per_line: 0,
            classes: classes.to_vec(),
        };
        for (index, line) in body.split(|&b| b == b'\n').enumerate() {
            strings.push_line(path, index + 1, line)?;
        }
        Ok(strings)
    }

    /// Builds bit strings from generated lines; each of `lines` is `(bits, label)`.
    pub(crate) fn from_lines(
        lines: impl IntoIterator<Item = (Vec<u8>, u32)>,
        bits_per_line: usize,
        classes: Vec<u32>,
    ) -> Self {
        let mut bits = Vec::new();
        let mut labels = Vec::new();
        for (line, label) in lines {
            debug_assert_eq!(line.len(), bits_per_line);
            bits.extend(line);
            labels.push(label);
        }
        Self {
            bits,
            labels,
            bits_per_line,
            classes,
        }
    }

    /// Validates line number `line` of `path` and appends it.
    fn push_line(&mut self, path: &Path, line: usize, text: &[u8]) -> Result<(), DataError> {
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let mut fields = text
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty());
        let (Some(bits), Some(label), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(DataError::QrngSyntax {
                path: path.to_path_buf(),
                line,
            });
        };
        if line == 1 {
            self.bits_per_line = bits.len();
        } else if bits.len() != self.bits_per_line {
            return Err(DataError::QrngLength {
                path: path.to_path_buf(),
                line,
                expected: self.bits_per_line,
                found: bits.len(),
            });
        }
        if let Some(column) = bits.iter().position(|&b| b != b'0' && b != b'1') {
            let indent = text.len() - text.trim_ascii_start().len();
            return Err(DataError::QrngBit {
                path: path.to_path_buf(),
                line,
                column: indent + column + 1,
                found: String::from_utf8_lossy(&bits[column..=column]).into_owned(),
            });
        }
        // Only the canonical decimal form: `+1` or `0001` is a typo more often than a label.
        let label = std::str::from_utf8(label)
            .ok()
            .filter(|l| l.bytes().all(|b| b.is_ascii_digit()) && (*l == "0" || !l.starts_with('0')))
            .and_then(|l| l.parse::<u32>().ok())
            .filter(|l| self.classes.contains(l))
            .ok_or_else(|| DataError::QrngLabel {
                path: path.to_path_buf(),
                line,
                label: crate::error::excerpt(label),
                allowed: self.classes.clone(),
            })?;
        self.bits.extend(bits.iter().map(|b| b - b'0'));
        self.labels.push(label);
        Ok(())
    }

    /// Number of lines.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there is no line.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Bits on every line.
    pub fn bits_per_line(&self) -> usize {
        self.bits_per_line
    }

    /// All bits, `[len, bits_per_line]` row-major, each 0 or 1.
    pub fn bits(&self) -> &[u8] {
        &self.bits
    }

    /// The bits of line `index` (from 0), `[bits_per_line]`; panics if `index >= len`.
    pub fn line(&self, index: usize) -> &[u8] {
        &self.bits[index * self.bits_per_line..(index + 1) * self.bits_per_line]
    }

    /// The label of every line, `[len]`.
    pub fn labels(&self) -> &[u32] {
        &self.labels
    }

    /// The declared label set, in the order that [`Self::to_dataset`] numbers the classes.
    pub fn classes(&self) -> &[u32] {
        &self.classes
    }

    /// Fraction of ones among all bits of the lines labelled `label` (`None` without such a line).
    pub fn mean_bit(&self, label: u32) -> Option<f64> {
        let (ones, lines) = (0..self.len()).filter(|&i| self.labels[i] == label).fold(
            (0usize, 0usize),
            |(ones, lines), i| {
                let line_ones = self.line(i).iter().map(|&b| usize::from(b)).sum::<usize>();
                (ones + line_ones, lines + 1)
            },
        );
        (lines > 0).then(|| ones as f64 / (lines * self.bits_per_line) as f64)
    }

    /// The lines as a data set: features are the bits as `0.0`/`1.0`, `[bits_per_line]` per
    /// sample; the class of a line is the position of its label in [`Self::classes`].
    pub fn to_dataset(&self) -> Dataset {
        let features = self.bits.iter().map(|&b| f32::from(b)).collect();
        let labels = self
            .labels
            .iter()
            .map(|l| self.classes.iter().position(|c| c == l).unwrap_or_default() as i64)
            .collect();
        Dataset::new(features, labels, vec![self.bits_per_line])
            .expect("bit strings hold one line of bits per label")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::Scratch;

    fn read(text: &str) -> Result<BitStrings, DataError> {
        let scratch = Scratch::new();
        BitStrings::read(&scratch.write("bits.txt", text.as_bytes()), &QRNG_LABELS)
    }

    #[test]
    fn reads_lines_of_bits_and_labels() {
        let strings = read("0101 1\r\n1110 3\n  0000\t2\n").unwrap();
        assert_eq!((strings.len(), strings.bits_per_line()), (3, 4));
        assert_eq!(strings.line(1), &[1, 1, 1, 0]);
        assert_eq!(strings.labels(), &[1, 3, 2]);
        assert_eq!(strings.mean_bit(3), Some(0.75));
        assert_eq!(strings.mean_bit(2), Some(0.0));
        let data = strings.to_dataset();
        assert_eq!(data.labels(), &[0, 2, 1]);
        assert_eq!(data.sample(0), &[0.0, 1.0, 0.0, 1.0]);
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let text = "0101 1\r\n1110 3\n";
        let scratch = Scratch::new();
        let marked = scratch.write("marked.txt", &[UTF8_BOM, text.as_bytes()].concat());
        let plain = scratch.write("plain.txt", text.as_bytes());
        assert_eq!(
            BitStrings::read(&marked, &QRNG_LABELS).unwrap(),
            BitStrings::read(&plain, &QRNG_LABELS).unwrap()
        );
        // Errors on the first line count columns from after the mark, as an editor shows them.
        let err = read("\u{feff}0121 1\n").unwrap_err();
        assert!(
            matches!(
                err,
                DataError::QrngBit {
                    line: 1,
                    column: 3,
                    ..
                }
            ),
            "{err}"
        );
        // A mark alone is an empty file.
        assert!(matches!(
            read("\u{feff}\n"),
            Err(DataError::QrngEmpty { .. })
        ));
    }

    #[test]
    fn names_the_line_of_a_short_string() {
        let line = "1".repeat(100);
        let short = "1".repeat(99);
        let err = read(&format!("{line} 1\n{line} 2\n{short} 3\n")).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::QrngLength {
                    line: 3,
                    expected: 100,
                    found: 99,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("bits.txt: line 3"), "{err}");
    }

    #[test]
    fn names_line_and_column_of_a_non_bit() {
        let err = read("0101 1\n0121 2\n").unwrap_err();
        assert!(
            matches!(
                err,
                DataError::QrngBit {
                    line: 2,
                    column: 3,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("\"2\" is not a bit"), "{err}");
    }

    #[test]
    fn refuses_labels_outside_the_declared_set() {
        for label in ["4", "0", "x", "-1", "+1", "0001", "01"] {
            let err = read(&format!("01 1\n10 {label}\n")).unwrap_err();
            assert!(matches!(err, DataError::QrngLabel { line: 2, .. }), "{err}");
        }
    }

    #[test]
    fn refuses_malformed_and_empty_files() {
        for text in ["0101\n", "0101 1 2\n", "01 1\n\n10 2\n"] {
            assert!(
                matches!(read(text), Err(DataError::QrngSyntax { .. })),
                "{text:?}"
            );
        }
        assert!(matches!(read(""), Err(DataError::QrngEmpty { .. })));
        assert!(matches!(read("\n"), Err(DataError::QrngEmpty { .. })));
    }

    #[test]
    fn reads_the_vendored_recording() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../data/qrng/AI_2qubits_training_data.txt");
        let strings = BitStrings::read(&path, &QRNG_LABELS).unwrap();
        assert_eq!((strings.len(), strings.bits_per_line()), (6000, 100));
        for label in QRNG_LABELS {
            assert_eq!(
                strings.labels().iter().filter(|&&l| l == label).count(),
                2000
            );
        }
    }
}
