//! NumPy `.npy` files (format 1.0, C order, little-endian): how workloads hand the PyTorch
//! peers what Quench drew (market windows, tasks, initial weights), so that both train on the
//! same values. Only writing is needed; the crates that also read `.npy` bring a parser of
//! Python literals with them, so the thirty lines live here.

use std::path::Path;

use anyhow::Context as _;

/// An element type numpy names with a `descr`.
pub trait Element: Copy {
    /// numpy's name of the little-endian type.
    const DESCR: &'static str;
    /// Appends the value's little-endian bytes.
    fn extend_le(self, out: &mut Vec<u8>);
}

impl Element for f32 {
    const DESCR: &'static str = "<f4";
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl Element for f64 {
    const DESCR: &'static str = "<f8";
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl Element for i64 {
    const DESCR: &'static str = "<i8";
    fn extend_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

/// Writes `values` (row-major, `shape`'s product of them) as a `.npy` file at `path`, at once
/// ([`write_atomically`](quench_support::files::write_atomically)): a reader never sees half a
/// file. The folder is created if it is missing.
pub fn write<T: Element>(path: &Path, shape: &[usize], values: &[T]) -> anyhow::Result<()> {
    let count: usize = shape.iter().product();
    anyhow::ensure!(
        count == values.len(),
        "{}: shape {shape:?} holds {count} values, not {}",
        path.display(),
        values.len()
    );
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    // A Python 1-tuple needs its trailing comma.
    let dims = match dims.as_slice() {
        [one] => format!("{one},"),
        _ => dims.join(", "),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({dims}), }}",
        T::DESCR
    );
    // Magic, version and header length take 10 bytes; spaces and a newline end the header so
    // that the data starts at a multiple of 64, as numpy writes it.
    let header = (10 + dict.len() + 1).next_multiple_of(64) - 10;
    let mut file = Vec::with_capacity(10 + header + values.len() * 8);
    file.extend_from_slice(b"\x93NUMPY\x01\x00");
    file.extend_from_slice(&u16::try_from(header)?.to_le_bytes());
    file.extend_from_slice(dict.as_bytes());
    file.resize(10 + header - 1, b' ');
    file.push(b'\n');
    for &v in values {
        v.extend_le(&mut file);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    quench_support::files::write_atomically(path, &file)
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The body of a `.npy` file [`write`] wrote, after checking that its header holds
    /// `header` and ends where numpy ends it.
    pub(crate) fn body(path: &Path, header: &str) -> Vec<u8> {
        let file = std::fs::read(path).unwrap();
        assert_eq!(&file[..8], b"\x93NUMPY\x01\x00", "{}", path.display());
        let length = usize::from(u16::from_le_bytes([file[8], file[9]]));
        assert_eq!((10 + length) % 64, 0);
        let dict = std::str::from_utf8(&file[10..10 + length]).unwrap();
        assert!(dict.contains(header) && dict.ends_with('\n'), "{dict}");
        file[10 + length..].to_vec()
    }

    #[test]
    fn headers_shapes_and_values_are_numpys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.npy");
        write(&path, &[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, -6.5]).unwrap();
        let values: Vec<f32> = body(
            &path,
            "'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        )
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
        assert_eq!(values, [1.0, 2.0, 3.0, 4.0, 5.0, -6.5]);
        write(&path, &[2], &[7i64, -1]).unwrap();
        assert_eq!(body(&path, "'<i8'").len(), 16);
        body(&path, "'shape': (2,)");
        let err = write(&path, &[3], &[1.0f64]).unwrap_err().to_string();
        assert!(err.contains("holds 3 values, not 1"), "{err}");
    }
}
