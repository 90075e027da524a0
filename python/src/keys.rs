//! Keys from Python: `bytes` as they are, `str` as its UTF-8 bytes (what memcached clients send).
//!
//! The wheel is built for the stable ABI of CPython 3.9 (abi3), whose only way to a `str`'s UTF-8
//! is a copy into a new `bytes` object (`PyUnicode_AsUTF8String`). CPython 3.10 added
//! `PyUnicode_AsUTF8AndSize` to the stable ABI: it lends the UTF-8 the string keeps (for an ASCII
//! string, its own characters) without a copy. Declaring it would tie the wheel to a symbol outside
//! 3.9's stable ABI, which its `cp39-abi3` tag promises to keep to, so on 3.10 and later it is found at
//! run time instead ([`Utf8Lender`]); on 3.9 `str` keys are copied. The copy costs more than the rest
//! of a batched lookup: over the benchmark's 1,000,000 keys (`scripts/bench-python`), `lookup_many`
//! took 66 ns a `str` key on 3.9 against 30 ns a `bytes` key, and 22–24 ns a `str` key on 3.11.

use std::ffi::c_char;
use std::sync::OnceLock;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// `PyUnicode_AsUTF8AndSize`'s signature (stable ABI since CPython 3.10).
type AsUtf8AndSize =
    unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::Py_ssize_t) -> *const c_char;

/// The interpreter's `PyUnicode_AsUTF8AndSize` when it is part of its stable ABI (3.10+) and can be
/// found; found once per process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Utf8Lender(AsUtf8AndSize);

static LENDER: OnceLock<Option<Utf8Lender>> = OnceLock::new();

impl Utf8Lender {
    fn get(py: Python<'_>) -> Option<Utf8Lender> {
        *LENDER.get_or_init(|| {
            if py.version_info() < (3, 10) {
                return None;
            }
            Utf8Lender::find()
        })
    }

    #[allow(
        unsafe_code,
        reason = "dlsym: finding a stable-ABI function at run time (module docs)"
    )]
    fn find() -> Option<Utf8Lender> {
        // SAFETY: (1) dlsym with RTLD_DEFAULT only reads the process's symbol tables; the name is a
        // NUL-terminated literal. (2) The symbol, when found, is CPython's `PyUnicode_AsUTF8AndSize`,
        // whose C signature `const char *(PyObject *, Py_ssize_t *)` is `AsUtf8AndSize`'s and has
        // not changed since 3.3; we only look it up on 3.10+, where it is part of the stable ABI.
        unsafe {
            let symbol = libc::dlsym(libc::RTLD_DEFAULT, c"PyUnicode_AsUTF8AndSize".as_ptr());
            if symbol.is_null() {
                return None;
            }
            Some(Utf8Lender(std::mem::transmute::<
                *mut std::ffi::c_void,
                AsUtf8AndSize,
            >(symbol)))
        }
    }

    /// The UTF-8 of `text`, lent for as long as `text` is borrowed.
    #[allow(unsafe_code, reason = "calling the function found by `find`")]
    fn utf8<'a>(self, text: &'a Bound<'_, PyString>) -> PyResult<&'a [u8]> {
        let mut size: ffi::Py_ssize_t = 0;
        // SAFETY: (1) `text` is a live `str` (the GIL is held: `Bound` proves it), as the function
        // requires. (2) On success it returns a pointer to `size` bytes of UTF-8 that the string
        // object owns and keeps unchanged until it is freed (its UTF-8 representation, or its own
        // ASCII data); the slice borrows `text`, which keeps the object alive. (3) On failure (a
        // lone surrogate) it returns NULL with an exception set, which `PyErr::fetch` takes.
        unsafe {
            let data = (self.0)(text.as_ptr(), &mut size);
            if data.is_null() {
                return Err(PyErr::fetch(text.py()));
            }
            Ok(std::slice::from_raw_parts(data.cast::<u8>(), size as usize))
        }
    }
}

/// A key held for as long as a lookup reads it.
#[derive(Debug)]
pub(crate) enum Held<'py> {
    /// A `bytes` key, or a `str` key's UTF-8 copy.
    Bytes(Bound<'py, PyBytes>),
    /// A `str` key whose UTF-8 is lent.
    Lent(Bound<'py, PyString>, Utf8Lender),
}

impl<'py> Held<'py> {
    /// Takes `key`, a `str` or `bytes` (a `TypeError` otherwise).
    pub(crate) fn new(key: Bound<'py, PyAny>) -> PyResult<Held<'py>> {
        let key = match key.cast_into::<PyString>() {
            Ok(text) => {
                return Ok(match Utf8Lender::get(text.py()) {
                    Some(lender) => Held::Lent(text, lender),
                    None => Held::Bytes(text.encode_utf8()?),
                })
            }
            Err(e) => e.into_inner(),
        };
        match key.cast_into::<PyBytes>() {
            Ok(bytes) => Ok(Held::Bytes(bytes)),
            Err(e) => Err(not_a_key(&e.into_inner())),
        }
    }

    /// The key's bytes.
    pub(crate) fn bytes(&self) -> PyResult<&[u8]> {
        match self {
            Held::Bytes(b) => Ok(b.as_bytes()),
            Held::Lent(text, lender) => lender.utf8(text),
        }
    }
}

/// Appends `key`'s bytes (a `str`'s UTF-8, or a `bytes`) to `arena`: a batch's keys are copied into
/// one buffer of the batch's own, so that each key object is let go while its cache line is still
/// at hand (holding references until the batch is placed would touch every object a second time,
/// long evicted by then), and the batch can be placed without the GIL whatever other threads do to
/// the keys meanwhile.
pub(crate) fn append_key(key: &Bound<'_, PyAny>, arena: &mut Vec<u8>) -> PyResult<()> {
    if let Ok(text) = key.cast::<PyString>() {
        match Utf8Lender::get(key.py()) {
            Some(lender) => arena.extend_from_slice(lender.utf8(text)?),
            None => arena.extend_from_slice(text.encode_utf8()?.as_bytes()),
        }
        return Ok(());
    }
    match key.cast::<PyBytes>() {
        Ok(bytes) => {
            arena.extend_from_slice(bytes.as_bytes());
            Ok(())
        }
        Err(_) => Err(not_a_key(key)),
    }
}

/// The error for a key of another type.
fn not_a_key(key: &Bound<'_, PyAny>) -> PyErr {
    let type_name = key
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string());
    PyTypeError::new_err(format!("a key must be str or bytes, not {type_name}"))
}

/// The keys of an iterable, to be taken in chunks; refuses a lone `str` or `bytes` (an iterable of
/// characters or integers, never what was meant).
pub(crate) fn iterate<'py>(
    keys: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, pyo3::types::PyIterator>> {
    if keys.is_instance_of::<PyString>() || keys.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(
            "lookup_many takes an iterable of keys, not one key (use lookup)",
        ));
    }
    keys.try_iter()
}
