//! The IDX format of MNIST and Fashion-MNIST, raw or gzip'ed.
//!
//! An IDX file is a 4-byte magic number `00 00 <type> <rank>`, then `rank` big-endian `u32`
//! dimensions, then the elements in row-major order. Only unsigned bytes (type `0x08`), the
//! type of every MNIST-like file, are read.

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
/// the data is exactly as long as the dimensions declare. A gzip stream is inflated only as far
/// as its header declares (and one byte more, to see trailing data, which is then counted
/// without being kept): a small file that inflates to gigabytes costs no more memory than the
/// array it declares.
pub fn read_idx(path: &Path) -> Result<IdxArray, DataError> {
    let raw = quench_support::files::read_bounded(path, quench_support::files::DATA_LIMIT)
        .map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if is_gzip(&raw) {
        let gzip_error = |source| DataError::Gzip {
            path: path.to_path_buf(),
            source,
        };
        parse(&mut GzDecoder::new(raw.as_slice()), path, &gzip_error)
    } else {
        let io_error = |source| DataError::Io {
            path: path.to_path_buf(),
            source,
        };
        parse(&mut raw.as_slice(), path, &io_error)
    }
}

/// Whether `head` (the first bytes of a file) starts a gzip stream.
pub(crate) fn is_gzip(head: &[u8]) -> bool {
    head.starts_with(&GZIP_MAGIC)
}

/// Fills `buf` from `reader` as far as the stream goes: the bytes read.
fn read_up_to(reader: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Reads and validates an IDX array of unsigned bytes from `reader` (the contents of `path`),
/// keeping no more than the header declares; `read_error` names a failing read.
fn parse(
    reader: &mut dyn Read,
    path: &Path,
    read_error: &dyn Fn(std::io::Error) -> DataError,
) -> Result<IdxArray, DataError> {
    let truncated = |expected: u64, found: u64| DataError::IdxTruncated {
        path: path.to_path_buf(),
        expected,
        found,
    };
    let mut head = [0u8; 4];
    let got = read_up_to(reader, &mut head).map_err(read_error)?;
    if got < 4 {
        return Err(truncated(4, got as u64));
    }
    if head[0] != 0 || head[1] != 0 {
        return Err(DataError::IdxMagic {
            path: path.to_path_buf(),
            found: [head[0], head[1]],
        });
    }
    if head[2] != UNSIGNED_BYTE {
        return Err(DataError::IdxElementType {
            path: path.to_path_buf(),
            found: head[2],
        });
    }
    let rank = head[3];
    if rank == 0 {
        return Err(DataError::IdxRank {
            path: path.to_path_buf(),
            found: rank,
            expected: "at least 1",
        });
    }
    let header = 4 + 4 * u64::from(rank);
    let mut dim_bytes = vec![0u8; 4 * usize::from(rank)];
    let got = read_up_to(reader, &mut dim_bytes).map_err(read_error)?;
    if got < dim_bytes.len() {
        return Err(truncated(header, 4 + got as u64));
    }
    let dims: Vec<usize> = dim_bytes
        .chunks_exact(4)
        .map(|d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize)
        .collect();
    let elements = dims.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
    let total = header.saturating_add(elements);
    let mut data = Vec::new();
    reader
        .take(elements)
        .read_to_end(&mut data)
        .map_err(read_error)?;
    if (data.len() as u64) < elements {
        return Err(truncated(total, header + data.len() as u64));
    }
    let extra = std::io::copy(reader, &mut std::io::sink()).map_err(read_error)?;
    if extra > 0 {
        return Err(DataError::IdxTrailing {
            path: path.to_path_buf(),
            offset: total,
            extra,
        });
    }
    Ok(IdxArray { dims, data })
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
    fn a_gzip_bomb_is_refused_without_keeping_what_it_inflates_to() {
        // The header declares one byte; 64 MiB of zeros follow, about 64 KiB compressed.
        let mut bytes = idx_bytes(&[1], &[7]);
        bytes.resize(bytes.len() + (64 << 20), 0);
        let packed = gzip(&bytes);
        assert!(packed.len() < 1 << 20, "{}", packed.len());
        let scratch = Scratch::new();
        let path = scratch.write("bomb-idx1-ubyte.gz", &packed);
        let err = read_idx(&path).unwrap_err();
        assert!(
            matches!(err, DataError::IdxTrailing { offset: 9, extra, .. } if extra == 64 << 20),
            "{err}"
        );
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
    fn a_declared_size_past_two_to_the_64_is_said_so() {
        // Three dimensions of 2^32 - 1: about 7.9e28 bytes, past what a u64 counts.
        let mut bytes = vec![0, 0, 8, 3];
        bytes.extend([u32::MAX.to_be_bytes(); 3].concat());
        let (_, err) = error_of(&bytes);
        assert!(
            err.to_string().contains("declares 2^64 or more bytes"),
            "{err}"
        );
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
