"""Every public name of the package has a docstring (what ``help()`` shows), and the stub of the
native module names everything the module has (what type checkers and editors see of it)."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest

import shardring
import shardring._shardring as native

STUB = Path(shardring.__file__).with_name("_shardring.pyi")
PUBLIC_MODULES = ["shardring", "shardring.uhashring", "shardring.pymemcache"]
#: Dunder methods that are API (the container protocol, context managers, item access).
API_DUNDERS = {"__len__", "__contains__", "__iter__", "__getitem__", "__setitem__", "__delitem__",
               "__enter__", "__exit__"}


def documented(obj: Any) -> bool:
    doc = getattr(obj, "__doc__", None)
    return isinstance(doc, str) and bool(doc.strip())


def members(cls: type) -> Iterator[Tuple[str, Any]]:
    """The class's own public members and API dunders: methods, static methods, properties and the
    native getters (data attributes and inherited members are the business of their own classes)."""
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in API_DUNDERS:
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property) or inspect.isroutine(value) or inspect.isdatadescriptor(value):
            yield name, value


def public_names(module: Any) -> List[str]:
    return list(getattr(module, "__all__", [n for n in dir(module) if not n.startswith("_")]))


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_has_a_docstring(module_name: str) -> None:
    if module_name == "shardring.pymemcache":
        pytest.importorskip("pymemcache")
    module = importlib.import_module(module_name)
    missing = [] if documented(module) else [module_name]
    for name in public_names(module):
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or callable(obj)):
            continue  # data (__version__, COMPAT_MODES, ...): documented where they are listed
        if inspect.isclass(obj):
            # Its own docstring, not one inherited from a base class (an exception's).
            if not (isinstance(obj.__dict__.get("__doc__"), str) and obj.__dict__["__doc__"].strip()):
                missing.append(f"{module_name}.{name}")
            missing += [f"{module_name}.{name}.{m}" for m, v in members(obj) if not documented(v)]
        elif not documented(obj):
            missing.append(f"{module_name}.{name}")
    assert not missing, f"public names without a docstring: {missing}"


def test_the_walk_sees_the_names_it_is_meant_to_check() -> None:
    # The issue named Ring.from_twemproxy; the walk must reach static methods and native getters.
    ring_members = dict(members(shardring.Ring))
    assert {"from_twemproxy", "from_members", "lookup", "nodes", "__len__"} <= set(ring_members)
    assert documented(shardring.Ring.from_twemproxy)
    assert "twemproxy" in (shardring.Ring.from_twemproxy.__doc__ or "")


def stub_tree() -> ast.Module:
    return ast.parse(STUB.read_text(encoding="utf-8"))


def stub_names() -> Tuple[Set[str], Dict[str, Dict[str, str]]]:
    """The stub's top-level names, and for each class the kind of each member it declares
    (``property``, ``staticmethod``, ``method``, ``attribute``)."""
    top: Set[str] = set()
    classes: Dict[str, Dict[str, str]] = {}
    for node in stub_tree().body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
        elif isinstance(node, ast.Assign):
            top.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if isinstance(node, ast.ClassDef):
            kinds: Dict[str, str] = {}
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    decorators = {d.id for d in item.decorator_list if isinstance(d, ast.Name)}
                    kinds[item.name] = next(
                        (k for k in ("property", "staticmethod") if k in decorators), "method"
                    )
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    kinds[item.target.id] = "attribute"
            classes[node.name] = kinds
    return top, classes


def runtime_kind(cls: type, name: str) -> str:
    value = vars(cls)[name]
    if isinstance(value, staticmethod) or type(value).__name__ == "builtin_function_or_method":
        return "staticmethod"
    if isinstance(value, property) or type(value).__name__ == "getset_descriptor":
        return "property"
    return "method"


def test_the_stub_names_every_public_name_of_the_native_module() -> None:
    top, classes = stub_names()
    names = set(public_names(native)) | {"__version__"}
    assert sorted(names - top) == [], "names of shardring._shardring missing from _shardring.pyi"
    # And nothing the module does not have (type aliases aside: they exist for the stub only).
    declared = {n.name for n in stub_tree().body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    assert sorted(declared - set(dir(native))) == [], "the stub declares what the module lacks"
    for name in public_names(native):
        cls = getattr(native, name)
        if not inspect.isclass(cls):
            continue
        stubbed = classes.get(name, {})
        wanted = {m: runtime_kind(cls, m) for m, _ in members(cls)}
        missing = sorted(set(wanted) - set(stubbed))
        assert missing == [], f"{name} members missing from the stub: {missing}"
        wrong = {m: (stubbed[m], k) for m, k in wanted.items() if stubbed[m] != k}
        assert wrong == {}, f"{name} members of another kind in the stub (stub, module): {wrong}"
        ghosts = sorted(m for m in stubbed if m not in dir(cls) and stubbed[m] != "attribute")
        assert ghosts == [], f"{name}: the stub declares members the class lacks: {ghosts}"


def test_the_stub_documents_what_it_declares() -> None:
    # Editors show the stub's docstrings for a native module, which has no source to read.
    undocumented = []
    for node in stub_tree().body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            if ast.get_docstring(node) is None:
                undocumented.append(node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and ast.get_docstring(item) is None:
                    undocumented.append(f"{node.name}.{item.name}")
    assert undocumented == [], f"stub entries without a docstring: {undocumented}"
