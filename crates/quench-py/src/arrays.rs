//! numpy arrays into Rust vectors.

use numpy::ndarray::Dimension;
use numpy::{Element, PyReadonlyArray, PyUntypedArrayMethods};

/// `array`'s elements in row-major order: one copy of its memory when it is C-contiguous (the
/// Python half makes the arrays it passes so), an element-wise walk otherwise. The walk over an
/// array took about a tenth of a 1,024-task evolution's time.
pub fn values<T: Element + Copy, D: Dimension>(array: &PyReadonlyArray<'_, T, D>) -> Vec<T> {
    match array.as_slice() {
        Ok(contiguous) if array.is_c_contiguous() => contiguous.to_vec(),
        _ => array.as_array().iter().copied().collect(),
    }
}
