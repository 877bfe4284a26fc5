//! Vectors of arrays, as mlx-c passes them.

use mlx_sys as sys;

use crate::Array;
use crate::error::{Result, check};

/// An owned `mlx_vector_array`.
pub struct VectorArray {
    pub(crate) raw: sys::mlx_vector_array,
}

impl Drop for VectorArray {
    fn drop(&mut self) {
        // SAFETY: `raw` is owned by this handle.
        unsafe { sys::mlx_vector_array_free(self.raw) };
    }
}

impl VectorArray {
    /// An empty vector.
    pub fn new() -> VectorArray {
        // SAFETY: plain constructor.
        VectorArray {
            raw: unsafe { sys::mlx_vector_array_new() },
        }
    }

    /// A vector holding (references to) `arrays`.
    pub fn from_arrays(arrays: &[&Array]) -> VectorArray {
        let raws: Vec<sys::mlx_array> = arrays.iter().map(|a| a.raw).collect();
        // SAFETY: the C side copies each handle (shared ownership).
        VectorArray {
            raw: unsafe { sys::mlx_vector_array_new_data(raws.as_ptr(), raws.len()) },
        }
    }

    /// Number of arrays.
    pub fn len(&self) -> usize {
        // SAFETY: valid handle.
        unsafe { sys::mlx_vector_array_size(self.raw) }
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The arrays, as owned handles.
    pub fn to_vec(&self) -> Result<Vec<Array>> {
        (0..self.len())
            .map(|i| {
                let mut a = Array::empty();
                // SAFETY: index in range; `a.raw` receives a new reference.
                check(unsafe { sys::mlx_vector_array_get(&mut a.raw, self.raw, i) })?;
                Ok(a)
            })
            .collect()
    }
}

impl Default for VectorArray {
    fn default() -> Self {
        VectorArray::new()
    }
}
