//! Memory handed to Python without a copy, through the buffer protocol: a batch's pixels and
//! labels become tensors with `torch.frombuffer` (sharing the memory, which lives as long as
//! the tensor). The buffer protocol is a C interface: this is the package's only unsafe code.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_int, c_void};

use std::sync::Weak;

use bucketload_image::{AlignedBuf, BatchData, ImagePipeline};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Owned storage of a [`Buffer`].
enum Storage {
    F32(#[allow(dead_code)] AlignedBuf<f32>),
    U8(#[allow(dead_code)] AlignedBuf<u8>),
    I64(#[allow(dead_code)] Vec<i64>),
    Bytes(bytes::Bytes),
    /// Handed back to its pipeline.
    Returned,
}

/// A typed, shaped, C-contiguous block of memory owned by Rust, exported through Python's
/// buffer protocol (`memoryview(buf)`, `torch.frombuffer(buf, dtype=…)`). Writable, so that
/// tensors over it are ordinary tensors; nothing else reads it once it is handed out.
#[pyclass(frozen, module = "bucketload._native")]
pub struct Buffer {
    _storage: Storage,
    /// The image pipeline a batch's pixels go back to when Python frees the buffer (no
    /// tensor, view or memoryview refers to it any more: each holds a reference), so that the
    /// next batch is written into memory already faulted in instead of fresh pages; with the
    /// process that made it: a forked child frees its copy as any other memory, never
    /// touching the pipeline's lock, which another thread may have held at the fork.
    home: Option<(u32, Weak<ImagePipeline>)>,
    /// Address of the first element, inside `_storage` (heap memory that never moves).
    addr: usize,
    bytes: usize,
    itemsize: usize,
    format: &'static CStr,
    readonly: bool,
    shape: Vec<ffi::Py_ssize_t>,
    strides: Vec<ffi::Py_ssize_t>,
}

impl Buffer {
    fn new(
        storage: Storage,
        ptr: *mut c_void,
        itemsize: usize,
        format: &'static CStr,
        shape: &[usize],
        readonly: bool,
    ) -> Buffer {
        let count: usize = shape.iter().product();
        let mut strides = vec![0; shape.len()];
        let mut step = itemsize;
        for (i, dim) in shape.iter().enumerate().rev() {
            strides[i] = step as ffi::Py_ssize_t;
            step *= *dim;
        }
        Buffer {
            _storage: storage,
            home: None,
            addr: ptr as usize,
            bytes: count * itemsize,
            itemsize,
            format,
            readonly,
            shape: shape.iter().map(|d| *d as ffi::Py_ssize_t).collect(),
            strides,
        }
    }

    pub(crate) fn f32(mut data: AlignedBuf<f32>, shape: &[usize]) -> Buffer {
        debug_assert_eq!(data.len(), shape.iter().product::<usize>());
        let ptr = data.as_mut_ptr().cast();
        Buffer::new(Storage::F32(data), ptr, 4, c"f", shape, false)
    }

    pub(crate) fn u8(mut data: AlignedBuf<u8>, shape: &[usize]) -> Buffer {
        debug_assert_eq!(data.len(), shape.iter().product::<usize>());
        let ptr = data.as_mut_ptr().cast();
        Buffer::new(Storage::U8(data), ptr, 1, c"B", shape, false)
    }

    /// This buffer, handed back to `pipeline` for reuse once Python frees it.
    pub(crate) fn returning_to(mut self, pipeline: Weak<ImagePipeline>) -> Buffer {
        self.home = Some((std::process::id(), pipeline));
        self
    }

    pub(crate) fn i64(mut data: Vec<i64>) -> Buffer {
        let shape = [data.len()];
        let ptr = data.as_mut_ptr().cast();
        Buffer::new(Storage::I64(data), ptr, 8, c"q", &shape, false)
    }

    /// Read-only bytes (a checkpoint read whole): no copy, so no writing either.
    pub(crate) fn bytes(data: bytes::Bytes) -> Buffer {
        let shape = [data.len()];
        let ptr = data.as_ptr().cast_mut().cast();
        Buffer::new(Storage::Bytes(data), ptr, 1, c"B", &shape, true)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let Some(pipeline) = self
            .home
            .take()
            .filter(|(pid, _)| *pid == std::process::id())
            .and_then(|(_, home)| home.upgrade())
        else {
            return;
        };
        let data = match std::mem::replace(&mut self._storage, Storage::Returned) {
            Storage::F32(pixels) => BatchData::ChwF32(pixels),
            Storage::U8(pixels) => BatchData::HwcU8(pixels),
            other => {
                self._storage = other;
                return;
            }
        };
        pipeline.recycle_data(data);
    }
}

#[pymethods]
impl Buffer {
    /// The shape, as a tuple.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.shape.iter().map(|d| *d as usize).collect()
    }

    /// Bytes held.
    #[getter]
    fn nbytes(&self) -> usize {
        self.bytes
    }

    fn __len__(&self) -> usize {
        self.shape.first().map_or(0, |d| *d as usize)
    }

    /// Read-only bytes pickle as `bytes` (a sample's member sent from a DataLoader worker);
    /// typed memory does not pickle: make a tensor of it first.
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let Storage::Bytes(data) = &self._storage else {
            return Err(PyTypeError::new_err(
                "cannot pickle a batch's Buffer: make a tensor of it (torch.frombuffer) first",
            ));
        };
        let bytes = py.get_type::<PyBytes>().into_any();
        Ok((bytes, (PyBytes::new(py, data),)))
    }

    /// Exports the memory (PEP 3118).
    ///
    /// # Safety
    /// Called by Python with a valid `view`.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no view to fill"));
        }
        let this = slf.get();
        if this.readonly && (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("this buffer is read-only"));
        }
        // SAFETY: `view` is valid (checked non-null, owned by the caller); every pointer
        // stored in it points into `this`, which the reference in `obj` keeps alive.
        unsafe {
            (*view).obj = slf.clone().into_any().into_ptr();
            (*view).buf = this.addr as *mut c_void;
            (*view).len = this.bytes as ffi::Py_ssize_t;
            (*view).readonly = c_int::from(this.readonly);
            (*view).itemsize = this.itemsize as ffi::Py_ssize_t;
            (*view).format = if (flags & ffi::PyBUF_FORMAT) == ffi::PyBUF_FORMAT {
                this.format.as_ptr().cast_mut()
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = this.shape.len() as c_int;
            (*view).shape = if (flags & ffi::PyBUF_ND) == ffi::PyBUF_ND {
                this.shape.as_ptr().cast_mut()
            } else {
                std::ptr::null_mut()
            };
            (*view).strides = if (flags & ffi::PyBUF_STRIDES) == ffi::PyBUF_STRIDES {
                this.strides.as_ptr().cast_mut()
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }

    /// Nothing to release: the memory lives as long as the buffer object.
    ///
    /// # Safety
    /// Called by Python with the view it got from `__getbuffer__`.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// The memory of a C-contiguous Python buffer (`bytes`, `memoryview`, a tensor's storage), to
/// read without a copy and without the GIL; `None` for other layouts.
///
/// The memory stays exported while `buf` lives (the exporter may not free or resize it), so
/// the slice is valid for as long as the borrow. Python code could still write to it from
/// another thread meanwhile, as it could during any C function that releases the GIL (e.g.
/// `file.write`); the bytes read are then unspecified, but no memory is unsafe to touch.
pub(crate) fn contiguous(buf: &PyBuffer<u8>) -> Option<&[u8]> {
    if !buf.is_c_contiguous() {
        return None;
    }
    let len = buf.len_bytes();
    if len == 0 {
        return Some(&[]);
    }
    // SAFETY: a C-contiguous buffer of `u8` items holds `len_bytes()` bytes from `buf_ptr()`
    // (non-null since the length is not zero), kept alive by the export `buf` holds.
    Some(unsafe { std::slice::from_raw_parts(buf.buf_ptr().cast::<u8>().cast_const(), len) })
}

/// The memory of a writable, C-contiguous Python buffer (the target of `readinto`), to fill
/// without a copy and without the GIL; `None` for read-only buffers and other layouts.
///
/// As with [`contiguous`], the export keeps the memory valid while `buf` lives; Python code
/// that touches it from another thread meanwhile sees unspecified bytes, as with
/// `io.FileIO.readinto`, which also fills the buffer without the GIL.
pub(crate) fn contiguous_mut(buf: &mut PyBuffer<u8>) -> Option<&mut [u8]> {
    if buf.readonly() || !buf.is_c_contiguous() {
        return None;
    }
    let len = buf.len_bytes();
    if len == 0 {
        return Some(&mut []);
    }
    // SAFETY: as in `contiguous`; the buffer is writable, and the exclusive borrow of `buf`
    // keeps this the only Rust reference to its memory.
    Some(unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr().cast::<u8>(), len) })
}
