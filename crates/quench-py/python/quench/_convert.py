"""Conversion of the caller's arguments into contiguous numpy arrays and settings into what the
native calls take, naming the argument.

Integers and floats are accepted where complex numbers are expected (they are converted);
complex numbers are refused where real ones are expected (the imaginary part would be lost
silently otherwise); anything that is not numeric is refused.
"""

import json
import os
from collections.abc import Mapping

import numpy as np


def _array(name, value):
    try:
        array = np.asarray(value)
    except Exception as error:  # ragged lists, objects numpy cannot read
        raise ValueError(f"{name}: cannot be read as an array: {error}") from None
    if array.dtype.kind not in "iufc":
        raise ValueError(f"{name}: expected numbers, found an array of dtype {array.dtype}")
    return array


def complex_array(name, value):
    """``value`` as a contiguous complex128 array (integers and floats converted)."""
    return np.ascontiguousarray(_array(name, value), dtype=np.complex128)


def real_array(name, value):
    """``value`` as a contiguous float64 array; complex input is refused."""
    array = _array(name, value)
    if array.dtype.kind == "c":
        raise ValueError(f"{name}: expected real numbers, found complex dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.float64)


def real_scalar(name, value):
    """``value`` as a Python float; anything else is refused naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: expected a real number, found {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        # An int beyond float's range (10**400): not a number the solvers can take.
        digits = len(str(abs(int(value))))
        raise ValueError(f"{name}: an integer of {digits} digits is beyond a 64-bit float") from None


def text(name, value):
    """``value`` if it is a string; anything else is refused naming ``name``."""
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected a string, found {type(value).__name__}")
    return value


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
        return os.fspath(value), None
    return None, table(name, value, "a TOML file's path or a dict of its settings")


def table(name, value, what, paths=()):
    """A dict of settings as the JSON text the native calls take; the keys in ``paths`` may
    hold a path object, or a list of them, written as strings. Anything but a dict is refused
    naming ``name`` (``what`` says what it should be)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{name}: {what}, not {type(value).__name__}")
    entries = dict(value)
    for key in paths:
        entry = entries.get(key)
        if isinstance(entry, os.PathLike):
            entries[key] = os.fspath(entry)
        elif isinstance(entry, (list, tuple)):
            entries[key] = [os.fspath(e) if isinstance(e, os.PathLike) else e for e in entry]
    try:
        return json.dumps(entries, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: {error}") from None


def finished(text, what):
    """A training call's outcome from its JSON text; one that Ctrl-C stopped between epochs
    raises ``KeyboardInterrupt`` whose ``outcome`` attribute holds it (every seed scored on its
    best weights so far)."""
    outcome = json.loads(text)
    if outcome.pop("interrupted", False):
        stop = KeyboardInterrupt(f"{what} stopped by Ctrl-C between epochs; the outcome of the "
                                 "epochs that finished is the exception's `outcome`")
        stop.outcome = outcome
        raise stop
    return outcome
