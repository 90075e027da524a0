//! Keys from Python: `bytes` as they are, `str` as its UTF-8 bytes (what memcached clients send).
//!
//! The wheel is built for the stable ABI of CPython 3.9 (abi3), whose only way to a `str`'s UTF-8
//! is a copy into a new `bytes` object (`PyUnicode_AsUTF8String`). CPython 3.10 added
//! `PyUnicode_AsUTF8AndSize` to the stable ABI: it lends the UTF-8 the string keeps (for an ASCII
//! string, its own characters) without a copy. Declaring it would tie the wheel to a symbol outside
//! 3.9's stable ABI, which its `cp39-abi3` tag promises to keep to, so on 3.10 and later it is found at
//! run time instead ([`Utf8Lender`]); on 3.9 `str` keys are copied. The copy costs more than the rest
//! of a batched lookup (BENCHMARKS.md, "python", has the figures on 3.9 and 3.11).
//!
//! A batch ([`Batch`]) reads each key once, while it holds the GIL, and lets it go before the next:
//! the caller hashes the bytes on the spot. A `list` or `tuple` of keys is read by index, its items
//! borrowed rather than taken (no reference count written to objects that are only read); any other
//! iterable through its iterator.

use std::ffi::c_char;
use std::sync::OnceLock;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyIterator, PyList, PyString, PyTuple};

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

/// Reads keys' bytes: a `str`'s UTF-8 (lent when the interpreter can, else copied) or a `bytes`'s own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader {
    /// The interpreter's UTF-8 lender, looked up once per batch rather than once per key.
    lender: Option<Utf8Lender>,
}

impl Reader {
    pub(crate) fn new(py: Python<'_>) -> Reader {
        Reader {
            lender: Utf8Lender::get(py),
        }
    }

    /// Calls `each` with `key`'s bytes. An exact `str` or `bytes` (what keys nearly always are) is
    /// recognised by comparing its type pointer, which under the stable ABI costs no call, where an
    /// `isinstance` check calls `PyType_GetFlags`; a subclass takes the general check.
    #[inline(always)]
    pub(crate) fn with_bytes<R>(
        self,
        key: Borrowed<'_, '_, PyAny>,
        each: impl FnOnce(&[u8]) -> R,
    ) -> PyResult<R> {
        if let Ok(text) = key.cast_exact::<PyString>() {
            return self.with_utf8(&text, each);
        }
        if let Ok(bytes) = key.cast_exact::<PyBytes>() {
            return Ok(each(bytes_of(&bytes)));
        }
        if let Ok(text) = key.cast::<PyString>() {
            return self.with_utf8(&text, each);
        }
        match key.cast::<PyBytes>() {
            Ok(bytes) => Ok(each(bytes_of(&bytes))),
            Err(_) => Err(not_a_key(&key.to_owned())),
        }
    }

    /// Calls `each` with `text`'s UTF-8.
    #[inline(always)]
    fn with_utf8<R>(
        self,
        text: &Bound<'_, PyString>,
        each: impl FnOnce(&[u8]) -> R,
    ) -> PyResult<R> {
        match self.lender {
            Some(lender) => Ok(each(lender.utf8(text)?)),
            None => Ok(each(text.encode_utf8()?.as_bytes())),
        }
    }
}

/// A `bytes` object's bytes in one call (`PyBytes_AsStringAndSize`), where pyo3's `as_bytes` makes
/// two under the stable ABI (`PyBytes_AsString`, `PyBytes_Size`), each checking the type again.
#[inline(always)]
#[allow(
    unsafe_code,
    reason = "one stable-ABI call for a bytes key's data and length: batched bytes keys measured faster (BENCHMARKS.md, python)"
)]
fn bytes_of<'a>(bytes: &'a Bound<'_, PyBytes>) -> &'a [u8] {
    let mut data: *mut c_char = std::ptr::null_mut();
    let mut size: ffi::Py_ssize_t = 0;
    // SAFETY: (1) `bytes` is a live `bytes` object (the GIL is held: `Bound` proves it), so
    // `PyBytes_AsStringAndSize` cannot fail: with a length pointer it neither checks for NUL bytes
    // nor raises, and it sets both outputs. (2) The data it points to is the object's own, `size`
    // bytes long and never changed (bytes are immutable); the slice borrows `bytes`, which keeps the
    // object alive.
    unsafe {
        let status = ffi::PyBytes_AsStringAndSize(bytes.as_ptr(), &mut data, &mut size);
        debug_assert_eq!(status, 0);
        std::slice::from_raw_parts(data.cast::<u8>(), size as usize)
    }
}

/// Where a batch's keys come from.
#[derive(Debug)]
enum Source<'py> {
    /// An exact `list`, read by index; the next index to read.
    List(Bound<'py, PyList>, usize),
    /// An exact `tuple`, read by index; the next index to read.
    Tuple(Bound<'py, PyTuple>, usize),
    /// Any other iterable (a subclass of list may iterate differently, so it comes here too).
    Iter(Bound<'py, PyIterator>),
}

/// The keys of a `lookup_many` call, read a chunk at a time.
#[derive(Debug)]
pub(crate) struct Batch<'py> {
    /// The keys.
    source: Source<'py>,
    /// How their bytes are read.
    reader: Reader,
}

impl<'py> Batch<'py> {
    /// The keys of `keys`, an iterable; refuses a lone `str` or `bytes` ([`iterate`]).
    pub(crate) fn new(keys: &Bound<'py, PyAny>) -> PyResult<Batch<'py>> {
        let reader = Reader::new(keys.py());
        let source = if let Ok(list) = keys.cast_exact::<PyList>() {
            Source::List(list.clone(), 0)
        } else if let Ok(tuple) = keys.cast_exact::<PyTuple>() {
            Source::Tuple(tuple.clone(), 0)
        } else {
            Source::Iter(iterate(keys)?)
        };
        Ok(Batch { source, reader })
    }

    /// How many keys there are likely to be (0 when unknown): room to reserve for the answers.
    pub(crate) fn len_hint(&self) -> usize {
        match &self.source {
            Source::List(list, _) => list.len(),
            Source::Tuple(tuple, _) => tuple.len(),
            Source::Iter(iter) => iter.len().unwrap_or(0),
        }
    }

    /// Calls `each` with the bytes of each of the next `max` keys, fewer at the end; returns how many
    /// keys it read (0: none are left). A list's length is read again on every call, as its iterator
    /// would: other threads may change the list while a chunk is placed without the GIL.
    pub(crate) fn next_chunk(
        &mut self,
        max: usize,
        mut each: impl FnMut(&[u8]),
    ) -> PyResult<usize> {
        let reader = self.reader;
        match &mut self.source {
            Source::List(list, next) => {
                let end = list.len().min(*next + max);
                let from = *next;
                for i in from..end {
                    reader.with_bytes(list_item(list, i)?, &mut each)?;
                    *next = i + 1;
                }
                Ok(end.saturating_sub(from))
            }
            Source::Tuple(tuple, next) => {
                let end = tuple.len().min(*next + max);
                let from = *next;
                for i in from..end {
                    reader.with_bytes(tuple.get_borrowed_item(i)?, &mut each)?;
                    *next = i + 1;
                }
                Ok(end.saturating_sub(from))
            }
            Source::Iter(iter) => {
                let mut read = 0;
                for key in iter.by_ref().take(max) {
                    reader.with_bytes(key?.as_borrowed(), &mut each)?;
                    read += 1;
                }
                Ok(read)
            }
        }
    }
}

/// Item `i` of `list`, borrowed: pyo3 only hands out list items as new references (free-threaded
/// Python can change a list under a borrowed item), and writing every key's reference count twice
/// dirties a cache line per key object that a batch only needs to read.
#[inline(always)]
#[allow(
    unsafe_code,
    reason = "borrowing list items (PyList_GetItem): batched lookups measured faster than with new references (BENCHMARKS.md, python)"
)]
fn list_item<'a, 'py>(
    list: &'a Bound<'py, PyList>,
    i: usize,
) -> PyResult<Borrowed<'a, 'py, PyAny>> {
    // SAFETY: (1) `list` is a live `list` (the GIL is held: `Bound` proves it), and
    // `PyList_GetItem` checks `i` against its length, returning NULL with `IndexError` set, which
    // `from_ptr_or_err` takes. (2) The item it returns is borrowed from the list, which keeps it alive
    // until the list drops it: only code that changes the list can, and none runs while the item is
    // used. The wheel is for GIL-holding interpreters only (abi3 has no free-threaded build), and
    // between taking an item and letting it go `Batch::next_chunk` only reads its type and bytes
    // (`Reader::with_bytes`, which calls no Python code; on error it takes a new reference before
    // asking for the type's name) and hashes the bytes; the GIL is released only between chunks,
    // when no item is held.
    unsafe {
        let item = ffi::PyList_GetItem(list.as_ptr(), i as ffi::Py_ssize_t);
        Borrowed::from_ptr_or_err(list.py(), item)
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

/// The iterator of `keys`; refuses a lone `str` or `bytes` (an iterable of characters or integers,
/// never what was meant).
fn iterate<'py>(keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, pyo3::types::PyIterator>> {
    if keys.is_instance_of::<PyString>() || keys.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(
            "lookup_many takes an iterable of keys, not one key (use lookup)",
        ));
    }
    keys.try_iter()
}
