"""The type stubs (quench/*.pyi) declare every public function with the module's own
parameters: names, kinds and defaults, so that a parameter added to a module is not missing
from what type checkers and editors see."""

import ast
import importlib
import inspect
import pathlib

import pytest

import quench

PACKAGE = pathlib.Path(quench.__file__).parent
#: The package itself (``__init__.pyi``: ``devices``, ``doctor``) and its modules.
MODULES = ["", "bench", "circuit", "hybrid", "lindblad", "meta", "qrng", "sgld", "temporal"]


def stub_parameters(function):
    """``(name, kind, default)`` of a stub's ``def``, the default as source text (``...`` in
    a stub stands for whatever the module's default is)."""
    args = function.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, d) for a, d in zip(positional, defaults)]
    out += [(a.arg, inspect.Parameter.KEYWORD_ONLY, d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return [(name, kind, None if d is None else ast.unparse(d)) for name, kind, d in out]


def module_parameters(function):
    return [
        (p.name, p.kind, None if p.default is inspect.Parameter.empty else repr(p.default))
        for p in inspect.signature(function).parameters.values()
    ]


@pytest.mark.parametrize("name", MODULES)
def test_every_public_function_of_a_stub_has_the_modules_parameters(name):
    module = importlib.import_module(f"quench.{name}" if name else "quench")
    stub = ast.parse((PACKAGE / f"{name or '__init__'}.pyi").read_text())
    stubs = {node.name: node for node in stub.body if isinstance(node, ast.FunctionDef)}
    for public in module.__all__:
        function = getattr(module, public)
        if not inspect.isfunction(function):
            continue
        assert public in stubs, f"{name}.pyi lacks {public}"
        declared = stub_parameters(stubs[public])
        actual = module_parameters(function)
        assert [p[:2] for p in declared] == [p[:2] for p in actual], (name, public)
        for (parameter, _, stub_default), (_, _, default) in zip(declared, actual):
            assert (stub_default is None) == (default is None), (name, public, parameter)
            if stub_default not in (None, "..."):
                assert stub_default == default, (name, public, parameter, stub_default, default)
