//! The IDX format of MNIST and Fashion-MNIST, raw or gzip'ed.
//!
//! An IDX file is a 4-byte magic number `00 00 <type> <rank>`, then `rank` big-endian `u32`
//! dimensions, then the elements in row-major order. Only unsigned bytes (type `0x08`), the
//! type of every MNIST-like file, are read.

use std::fs;
use std::io::Read;
use std::path::Path;

use flate2::read::GzDecoder;

use crate::DataError;

/// Gzip streams start with these two bytes (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// IDX element type of unsigned bytes.
const UNSIGNED_BYTE: u8 = 0x08;

/// A validated IDX array of unsigned bytes: images `[n, rows, cols]` or labels `[n]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxArray {
    /// The dimensions, outermost first.
    pub dims: Vec<usize>,
    /// The elements, row-major; `data.len()` is the product of `dims`.
    pub data: Vec<u8>,
}

/// Reads and validates the IDX file at `path`, decompressing it if it starts with the gzip magic.
///
/// Checks the magic number, the element type, that there is at least one dimension, and that
/// the data is exactly as long as the dimensions declare.
pub fn read_idx(path: &Path) -> Result<IdxArray, DataError> {
    parse(read_maybe_gzip(path)?, path)
}

/// Whether `head` (the first bytes of a file) starts a gzip stream.
pub(crate) fn is_gzip(head: &[u8]) -> bool {
    head.starts_with(&GZIP_MAGIC)
}

/// The contents of `path`, decompressed when gzip'ed.
fn read_maybe_gzip(path: &Path) -> Result<Vec<u8>, DataError> {
    let raw = fs::read(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !is_gzip(&raw) {
        return Ok(raw);
    }
    let mut bytes = Vec::new();
    GzDecoder::new(raw.as_slice())
        .read_to_end(&mut bytes)
        .map_err(|source| DataError::Gzip {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(bytes)
}

/// Validates `bytes` as an IDX array of unsigned bytes read from `path`.
fn parse(mut bytes: Vec<u8>, path: &Path) -> Result<IdxArray, DataError> {
    let truncated = |expected: u64, found: usize| DataError::IdxTruncated {
        path: path.to_path_buf(),
        expected,
        found: found as u64,
    };
    if bytes.len() < 4 {
        return Err(truncated(4, bytes.len()));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(DataError::IdxMagic {
            path: path.to_path_buf(),
            found: [bytes[0], bytes[1]],
        });
    }
    if bytes[2] != UNSIGNED_BYTE {
        return Err(DataError::IdxElementType {
            path: path.to_path_buf(),
            found: bytes[2],
        });
    }
    let rank = bytes[3];
    if rank == 0 {
        return Err(DataError::IdxRank {
            path: path.to_path_buf(),
            found: rank,
            expected: "at least 1",
        });
    }
    let header = 4 + 4 * usize::from(rank);
    if bytes.len() < header {
        return Err(truncated(header as u64, bytes.len()));
    }
    let dims: Vec<usize> = bytes[4..header]
        .chunks_exact(4)
        .map(|d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize)
        .collect();
    let elements = dims.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
    let total = (header as u64).saturating_add(elements);
    let found = bytes.len() as u64;
    if found < total {
        return Err(truncated(total, bytes.len()));
    }
    if found > total {
        return Err(DataError::IdxTrailing {
            path: path.to_path_buf(),
            offset: total,
            extra: found - total,
        });
    }
    bytes.drain(..header);
    Ok(IdxArray { dims, data: bytes })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::test_files::{Scratch, gzip, idx_bytes};

    #[test]
    fn reads_raw_and_gzip_alike() {
        let scratch = Scratch::new();
        let bytes = idx_bytes(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let raw = read_idx(&scratch.write("a-idx2-ubyte", &bytes)).unwrap();
        let gz = read_idx(&scratch.write("a-idx2-ubyte.gz", &gzip(&bytes))).unwrap();
        assert_eq!(raw.dims, vec![2, 3]);
        assert_eq!(raw.data, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(raw, gz);
    }

    /// The error from reading `bytes` as a file, raw and gzip'ed (both must agree).
    fn error_of(bytes: &[u8]) -> (PathBuf, DataError) {
        let scratch = Scratch::new();
        let gz_err = read_idx(&scratch.write("f.gz", &gzip(bytes))).unwrap_err();
        let path = scratch.write("f", bytes);
        let err = read_idx(&path).unwrap_err();
        assert_eq!(
            err.to_string().replace(".gz", ""),
            gz_err.to_string().replace(".gz", "")
        );
        // The scratch directory goes away with `scratch`; only the path is kept for messages.
        (path, err)
    }

    #[test]
    fn rejects_a_wrong_magic_number() {
        let (path, err) = error_of(&[0, 1, 8, 1, 0, 0, 0, 0]);
        assert!(
            matches!(err, DataError::IdxMagic { found: [0, 1], .. }),
            "{err}"
        );
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()) && message.contains("byte 0"));
    }

    #[test]
    fn rejects_an_unsupported_element_type() {
        let (_, err) = error_of(&[0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert!(
            matches!(err, DataError::IdxElementType { found: 0x0d, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("byte 2"));
    }

    #[test]
    fn rejects_rank_zero() {
        let (_, err) = error_of(&[0, 0, 8, 0]);
        assert!(matches!(err, DataError::IdxRank { found: 0, .. }), "{err}");
    }

    #[test]
    fn reports_where_a_truncated_file_ends() {
        let (_, err) = error_of(&[0, 0, 8]);
        assert!(
            matches!(
                err,
                DataError::IdxTruncated {
                    expected: 4,
                    found: 3,
                    ..
                }
            ),
            "{err}"
        );
        let (_, err) = error_of(&[0, 0, 8, 2, 0, 0, 0, 2, 0, 0]);
        assert!(
            matches!(
                err,
                DataError::IdxTruncated {
                    expected: 12,
                    found: 10,
                    ..
                }
            ),
            "{err}"
        );
        let (_, err) = error_of(&idx_bytes(&[2, 3], &[1, 2, 3, 4, 5]));
        assert!(
            matches!(
                err,
                DataError::IdxTruncated {
                    expected: 18,
                    found: 17,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("truncated at byte 17"), "{err}");
    }

    #[test]
    fn rejects_bytes_after_the_data() {
        let (_, err) = error_of(&idx_bytes(&[2], &[1, 2, 3]));
        assert!(
            matches!(
                err,
                DataError::IdxTrailing {
                    offset: 10,
                    extra: 1,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn names_a_missing_file() {
        let scratch = Scratch::new();
        let path = scratch.dir().join("absent-idx1-ubyte");
        let err = read_idx(&path).unwrap_err();
        assert!(matches!(err, DataError::Io { .. }));
        assert!(err.to_string().contains("absent-idx1-ubyte"));
    }

    #[test]
    fn names_a_corrupt_gzip_stream() {
        let scratch = Scratch::new();
        let mut bytes = gzip(&idx_bytes(&[4], &[1, 2, 3, 4]));
        bytes.truncate(bytes.len() - 6);
        let err = read_idx(&scratch.write("cut.gz", &bytes)).unwrap_err();
        assert!(matches!(err, DataError::Gzip { .. }), "{err}");
    }
}
