"""The package's surface: docstrings everywhere, stubs shipped, names."""

import inspect
import pathlib

import beacon_rl
from beacon_rl import _native


def test_every_function_has_a_docstring():
    import importlib

    modules = [beacon_rl, _native]
    try:
        modules.append(importlib.import_module("beacon_rl.verl"))
    except ImportError:  # verl not installed
        pass
    missing = []
    for mod in modules:
        for name, obj in vars(mod).items():
            if (inspect.isfunction(obj) or inspect.isbuiltin(obj)) and getattr(obj, "__module__", "").startswith("beacon_rl"):
                if not (obj.__doc__ or "").strip():
                    missing.append(f"{mod.__name__}.{name}")
    assert not missing, missing


def test_stubs_and_marker_are_installed():
    root = pathlib.Path(beacon_rl.__file__).parent
    assert (root / "py.typed").exists()
    assert (root / "_native.pyi").exists()


def test_names():
    names = beacon_rl.names()
    assert {"beacon", "beacon_official", "gigpo"} <= set(names)
    assert set(beacon_rl.verl_names()) < set(names)


def _stub_functions():
    """The function definitions of the shipped ``_native.pyi``, by name."""
    import ast

    tree = ast.parse((pathlib.Path(beacon_rl.__file__).parent / "_native.pyi").read_text())
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _stub_params(fn):
    """(name, kind, has a default) of each parameter of a stub, as inspect names the kinds."""
    a = fn.args
    P = inspect.Parameter
    out = []
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)
    for i, arg in enumerate(positional):
        kind = P.POSITIONAL_ONLY if i < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        out.append((arg.arg, kind, i >= first_default))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out.append((arg.arg, P.KEYWORD_ONLY, default is not None))
    return out


def test_native_stubs_match_the_compiled_signatures():
    stubs = _stub_functions()
    compiled = {n: f for n, f in vars(_native).items() if inspect.isbuiltin(f)}
    assert set(stubs) == set(compiled)
    for name, fn in compiled.items():
        want = [(p.name, p.kind, p.default is not p.empty) for p in inspect.signature(fn).parameters.values()]
        assert _stub_params(stubs[name]) == want, name
        # Every parameter and the result are annotated.
        args = stubs[name].args
        assert all(a.annotation is not None for a in args.args + args.kwonlyargs), name
        assert stubs[name].returns is not None, name


def test_public_functions_are_annotated():
    import importlib

    modules = [beacon_rl]
    try:
        modules.append(importlib.import_module("beacon_rl.verl"))
    except ImportError:  # verl not installed
        pass
    for mod in modules:
        for name in mod.__all__:
            obj = getattr(mod, name)
            if not inspect.isfunction(obj):
                continue
            sig = inspect.signature(obj)
            missing = [p.name for p in sig.parameters.values() if p.annotation is p.empty]
            assert not missing, f"{mod.__name__}.{name}: {missing}"
            assert sig.return_annotation is not sig.empty, f"{mod.__name__}.{name}"


def test_names_docstrings_list_every_crate_addition():
    # Every name the crate adds to verl's is named where names() is documented.
    added = set(beacon_rl.names()) - set(beacon_rl.verl_names())
    for doc in (beacon_rl.names.__doc__, _native.names.__doc__):
        assert all(f"``{n}``" in doc or f"`{n}`" in doc for n in added), (added, doc)
