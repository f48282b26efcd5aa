"""Conversion of the caller's arguments into contiguous numpy arrays and settings into what the
native calls take, naming the argument.

Integers and floats are accepted where complex numbers are expected (they are converted);
complex numbers are refused where real ones are expected (the imaginary part would be lost
silently otherwise); anything that is not numeric is refused, and so is a masked array (its
mask would be dropped). An array is measured before it is copied: a copy that the host cannot
hold is refused naming the argument and its shape.

Whole numbers are Python or numpy integers, never bools or floats. Text, and the paths the
native calls take as text, must be valid UTF-8: a file name that is not (which Python carries
as ``os.fsdecode``'s surrogate escapes) is refused naming the argument.
"""

import json
import math
import os
from collections.abc import Mapping

import numpy as np

from . import _native

#: Copies smaller than this are not measured against the host's memory: the check reads a
#: file (about 20 us), under 1% of the time a copy of this size takes, and any host that runs
#: Quench holds one.
_CHECKED_FROM = 64 << 20


def _digits(n):
    """The decimal digits of the non-negative int ``n``, without writing it out (Python refuses
    to write an int of more than 4,300 digits as text)."""
    digits = max(1, math.ceil(n.bit_length() * math.log10(2)))
    return digits - 1 if digits > 1 and n < 10 ** (digits - 1) else digits


#: Characters of a value a message shows whole, as the native half's messages
#: (``quench_support::excerpt::SHOWN_CHARS``).
_SHOWN_CHARS = 200


def shown(value):
    """``value`` as a message shows it: its ``repr``, a long one by its ends and its length (as
    the native half's ``quench_support::excerpt``), and an int too long to read as its number of
    digits."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        magnitude = abs(int(value))
        if magnitude.bit_length() > 128:
            return f"an integer of {_digits(magnitude)} digits"
    try:
        written = repr(value)
    except ValueError:  # a container holding an int Python will not write out
        return f"a {type(value).__name__}"
    if len(written) > _SHOWN_CHARS:
        half = _SHOWN_CHARS // 2
        written = f"{written[:half]}…{written[-half:]} ({len(written)} characters)"
    return written


def _array(name, value):
    if isinstance(value, np.ma.MaskedArray):
        # np.asarray would keep the data and drop the mask: the masked entries would be
        # computed with as if they were numbers.
        raise TypeError(
            f"{name}: a masked array, whose mask Quench cannot honour; pass plain numbers "
            "(np.ma.filled(a, fill) or a.compressed(), as the computation needs)"
        )
    try:
        array = np.asarray(value)
    except Exception as error:  # ragged lists, objects numpy cannot read
        raise ValueError(f"{name}: cannot be read as an array: {error}") from None
    if array.dtype.kind not in "iufc":
        raise ValueError(f"{name}: expected numbers, found an array of dtype {array.dtype}")
    return array


def _contiguous(name, array, dtype):
    """``array`` as a contiguous array of ``dtype``, measured first. A broadcast or strided
    view (``np.broadcast_to``) holds terabytes in a few bytes until it is copied, so the copy
    is sized from the shape: this conversion's copy where one is needed, and the native call's,
    which always takes one. Refused naming ``name`` and the shape when the host cannot hold it,
    rather than numpy's ``MemoryError`` or the process killed for memory."""
    dtype = np.dtype(dtype)
    copies = 1 if array.flags.c_contiguous and array.dtype == dtype else 2
    needed = array.size * dtype.itemsize * copies
    what = f"{name}: shape {list(array.shape)} as {dtype}"
    if needed >= _CHECKED_FROM:
        # The native calls' own rule (quench_support::budget::check_fits), so that Python and
        # Rust refuse the same sizes.
        _native.check_host_memory(what, needed)
    try:
        # Not np.ascontiguousarray, which makes a 0-d array 1-d: a scalar must be refused as
        # the scalar it is ("found shape []"), not as a one-element vector.
        return np.require(array, dtype=dtype, requirements="C")
    except MemoryError:  # memory went since it was checked
        raise ValueError(f"{what} needs more host memory than there is") from None


def complex_array(name, value):
    """``value`` as a contiguous complex128 array (integers and floats converted)."""
    return _contiguous(name, _array(name, value), np.complex128)


def real_array(name, value):
    """``value`` as a contiguous float64 array; complex input is refused."""
    array = _array(name, value)
    if array.dtype.kind == "c":
        raise ValueError(f"{name}: expected real numbers, found complex dtype {array.dtype}")
    return _contiguous(name, array, np.float64)


def real_scalar(name, value):
    """``value`` as a Python float; anything else is refused naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: expected a real number, found {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        # An int beyond float's range (10**400): not a number the solvers can take.
        digits = _digits(abs(int(value)))
        raise ValueError(f"{name}: an integer of {digits} digits is beyond a 64-bit float") from None


def integer(name, value, least=0):
    """``value`` as a Python int of at least ``least``: a Python or numpy integer (never a bool
    or a float, which would be truncated silently); anything else is refused naming ``name``.
    At most ``2**63 - 1``, so that every native call can take it as a 64-bit integer."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: a whole number, not {type(value).__name__} {shown(value)}")
    value = int(value)
    if value < least:
        raise ValueError(f"{name}: a whole number of at least {least}, not {shown(value)}")
    if value >= 2**63:
        raise ValueError(f"{name}: {shown(value)} does not fit in a signed 64-bit integer, beyond any "
                         "count or index Quench takes")
    return value


def flag(name, value):
    """``value`` as a Python bool: ``True`` or ``False`` (numpy's too); anything else is
    refused naming ``name``, rather than read by its truth (``"no"`` would be true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: True or False, not {type(value).__name__} {shown(value)}")
    return bool(value)


def utf8(name, value):
    """``value``, a str, if it is valid UTF-8 text, which is all the native calls take; refused
    naming ``name`` otherwise. A file name that is not UTF-8 reaches Python as a str with
    ``os.fsdecode``'s surrogate escapes: the message shows its bytes."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        try:
            written = shown(value.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError:  # a lone surrogate that no file name decodes to
            written = shown(value)
        raise ValueError(
            f"{name}: {written} is not valid UTF-8, and Quench takes its text and paths as "
            "UTF-8 only (a file: rename it, or give it a UTF-8 name by a link)"
        ) from None
    return value


def path(name, value):
    """``value``, a str or a path object, as the UTF-8 text the native calls take (checked by
    :func:`utf8`)."""
    return utf8(name, os.fsdecode(value))


def text(name, value):
    """``value`` if it is a string of UTF-8 text; anything else is refused naming ``name``."""
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected a string, found {type(value).__name__}")
    return utf8(name, value)


def names(name, value):
    """``value`` as a list of strings: one string, or a list or tuple of them (``None`` stays
    ``None``); anything else is refused naming ``name``."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [text(f"{name}[{i}]", item) for i, item in enumerate(value)]
    return [text(name, value)]


def settings(name, value):
    """A configuration given as a TOML file's path or as a dict of its settings, as the native
    calls take it: ``(path, None)`` or ``(None, JSON text)``."""
    if isinstance(value, (str, os.PathLike)):
        return path(name, value), None
    return None, table(name, value, "a TOML file's path or a dict of its settings")


def table(name, value, what, paths=()):
    """A dict of settings as the JSON text the native calls take; the keys in ``paths`` may
    hold a path (a str or path object), or a list of them, written as strings and checked by
    :func:`path`. Anything but a dict is refused naming ``name`` (``what`` says what it should
    be)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{name}: {what}, not {type(value).__name__}")
    entries = dict(value)
    for key in paths:
        entry = entries.get(key)
        if isinstance(entry, (str, os.PathLike)):
            entries[key] = path(f"{name}: {key}", entry)
        elif isinstance(entry, (list, tuple)):
            entries[key] = [
                path(f"{name}: {key}[{i}]", e) if isinstance(e, (str, os.PathLike)) else e
                for i, e in enumerate(entry)
            ]
    return encoded(name, entries)


def _plain(value):
    # numpy scalars (a seed or wire from np.arange, an angle taken from an array) as the
    # Python numbers they are.
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a number, string, list or dict")


def encoded(name, value, what=None):
    """``value`` as the JSON text the native calls take (numpy scalars as Python numbers; NaN
    and infinities refused). What JSON cannot hold is refused naming ``name`` (and ``what``
    the value should be, when given)."""
    try:
        return json.dumps(value, default=_plain, allow_nan=False)
    except (TypeError, ValueError) as error:
        reason = str(error)
    except RecursionError:
        # The encoder recurses once per level: a dict or list nested about a thousand deep.
        reason = "nested too deeply to be written as JSON"
    raise ValueError(f"{name}: {reason}" if what is None else f"{name}: {what}: {reason}")


def finished(text, what):
    """A training call's outcome from its JSON text; one that Ctrl-C stopped between epochs
    raises ``KeyboardInterrupt`` whose ``outcome`` attribute holds it (every seed scored on its
    best weights so far), and one in which a seed's last training loss is not a number (JSON
    null: NaN or infinite, the training diverged) raises ``RuntimeError`` with the outcome
    likewise attached, as the benchmark records such a run as failed. An epoch whose loss
    overflowed and was skipped (f16's loss scaler) while training went on is not divergence."""
    outcome = json.loads(text)
    if outcome.pop("interrupted", False):
        stop = KeyboardInterrupt(f"{what} stopped by Ctrl-C between epochs; the outcome of the "
                                 "epochs that finished is the exception's `outcome`")
        stop.outcome = outcome
        raise stop
    for seed in outcome.get("seeds", []):
        # Per epoch: a list of losses (hybrid, temporal) or an epoch history (the classifier).
        losses = seed.get("train_loss")
        if losses is None:
            losses = [epoch.get("train_loss", 0.0) for epoch in seed.get("history", [])]
        if losses and losses[-1] is None:
            diverged = RuntimeError(
                f"{what}: seed {seed.get('seed')}: the training loss became NaN or infinite in "
                f"epoch {losses.index(None)} (counted from 0, as best_epoch) and stayed so: "
                "training diverged (a smaller learning rate may help); the outcome is the "
                "exception's `outcome`"
            )
            diverged.outcome = outcome
            raise diverged
    return outcome
