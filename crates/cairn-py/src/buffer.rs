//! A region protected from Python: a held buffer export of a writable, contiguous object, with
//! its Cairn dtype read from the buffer's format.
//!
//! Holding the export (not a copy) is what makes protection zero-copy and safe: the exporter
//! keeps the memory where it is while an export is open (numpy refuses `resize`, `bytearray`
//! refuses to grow), and the export holds a reference to the object, so the pointer stays
//! valid until the region is released.

use crate::error;
use cairn_core::Dtype;
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::CStr;

/// A protected Python buffer.
pub struct Region {
    /// Boxed so its address stays put while exported, as the buffer protocol expects.
    view: Box<ffi::Py_buffer>,
    dtype: Dtype,
}

// SAFETY: the view's pointers belong to the exporting object, which the view keeps alive; the
// bytes are only touched while the owning engine's lock is held, and the view is released
// with the GIL held (`Drop`).
unsafe impl Send for Region {}

impl Region {
    /// Export `obj`'s buffer for region `id`: it must be writable (a restart writes into it),
    /// contiguous (it is stored as one run of bytes) and of an element type Cairn stores.
    pub fn export(obj: &Bound<'_, PyAny>, id: i32) -> PyResult<Region> {
        let what = || format!("protect(id {id}): {}", type_name(obj));
        // SAFETY: `obj` is a live object and the GIL is held (we have a `Bound`).
        if unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } == 0 {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "{} does not expose a buffer: protect numpy arrays, bytearray, array.array or \
                 other objects with the buffer protocol; keep small Python values in ck.state",
                what()
            )));
        }
        let mut view = Box::new(ffi::Py_buffer::new());
        let flags = ffi::PyBUF_WRITABLE | ffi::PyBUF_FORMAT | ffi::PyBUF_STRIDES;
        // SAFETY: `view` is a valid, exclusively owned Py_buffer; on success it must be
        // released exactly once, which `Region`'s Drop does from here on.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } != 0 {
            let cause = PyErr::fetch(obj.py());
            return Err(error::invalid(format!(
                "{}: its buffer cannot be written into ({cause}); restart restores in place, so \
                 the object must be writable",
                what()
            )));
        }
        let mut region = Region {
            view,
            dtype: Dtype::Byte,
        };
        // SAFETY: the view was filled in by a successful PyObject_GetBuffer.
        if unsafe { ffi::PyBuffer_IsContiguous(&*region.view, b'A' as _) } == 0 {
            return Err(error::invalid(format!(
                "{} is not contiguous: Cairn stores a region as one run of bytes; protect a \
                 contiguous array (e.g. numpy.ascontiguousarray) and compute in it",
                what()
            )));
        }
        let format = if region.view.format.is_null() {
            None
        } else {
            // SAFETY: a non-NULL format is a NUL-terminated string owned by the exporter,
            // valid while the view is.
            Some(unsafe { CStr::from_ptr(region.view.format) })
        };
        region.dtype = dtype_of(format, region.view.itemsize)
            .map_err(|m| error::invalid(format!("{}: {m}", what())))?;
        Ok(region)
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Number of elements.
    pub fn count(&self) -> usize {
        self.len() / self.dtype.size()
    }

    fn len(&self) -> usize {
        // A successful export never has a negative length.
        usize::try_from(self.view.len).unwrap_or(0)
    }

    pub fn bytes(&self) -> &[u8] {
        if self.len() == 0 {
            return &[];
        }
        // SAFETY: a contiguous export covers `len` bytes from `buf`, valid while the view is
        // held; `&self` keeps it held for the borrow.
        unsafe { std::slice::from_raw_parts(self.view.buf.cast::<u8>(), self.len()) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len() == 0 {
            return &mut [];
        }
        // SAFETY: as in `bytes`, and the export was requested writable. Python code could
        // write the same memory concurrently only from another thread during a restart, which
        // is the application's race, as in C.
        unsafe { std::slice::from_raw_parts_mut(self.view.buf.cast::<u8>(), self.len()) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        Python::attach(|_| {
            // SAFETY: the view came from a successful PyObject_GetBuffer and is released once.
            unsafe { ffi::PyBuffer_Release(&mut *self.view) }
        });
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

/// The Cairn dtype of a buffer with struct-module `format` (None: unsigned bytes) and
/// `itemsize`. Sizes come from `itemsize`, not the format letter, so `l` is 8 bytes on LP64
/// Linux as numpy reports it.
pub fn dtype_of(format: Option<&CStr>, itemsize: isize) -> Result<Dtype, String> {
    let text = format.map(|f| f.to_string_lossy().into_owned());
    let fmt = text.as_deref().unwrap_or("B");
    let mut code = fmt;
    if let Some(rest) = code.strip_prefix(['@', '=']) {
        code = rest;
    } else if let Some(rest) = code.strip_prefix('<') {
        if cfg!(target_endian = "big") {
            return Err(format!(
                "format '{fmt}' is little-endian, not this machine's order"
            ));
        }
        code = rest;
    } else if let Some(rest) = code.strip_prefix(['>', '!']) {
        if cfg!(target_endian = "little") {
            return Err(format!(
                "format '{fmt}' is big-endian, not this machine's order (convert it with \
                 numpy's astype('=...') first)"
            ));
        }
        code = rest;
    }
    let unsupported = || {
        format!(
            "element format '{fmt}' ({itemsize} bytes) has no Cairn dtype; Cairn stores int8, \
             int16, int32, int64, uint8, uint32, uint64, float32 and float64 (protect other data \
             as bytes, e.g. array.view(numpy.uint8))"
        )
    };
    let dtype = match (code, itemsize) {
        ("b" | "h" | "i" | "l" | "q" | "n", 1) => Dtype::Int8,
        ("b" | "h" | "i" | "l" | "q" | "n", 2) => Dtype::Int16,
        ("b" | "h" | "i" | "l" | "q" | "n", 4) => Dtype::Int32,
        ("b" | "h" | "i" | "l" | "q" | "n", 8) => Dtype::Int64,
        ("B" | "H" | "I" | "L" | "Q" | "N" | "c", 1) => Dtype::Byte,
        ("B" | "H" | "I" | "L" | "Q" | "N", 4) => Dtype::Uint32,
        ("B" | "H" | "I" | "L" | "Q" | "N", 8) => Dtype::Uint64,
        ("f", 4) => Dtype::Float,
        ("d", 8) => Dtype::Double,
        _ => return Err(unsupported()),
    };
    Ok(dtype)
}
