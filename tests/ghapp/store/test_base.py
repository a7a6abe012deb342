"""The shared SQL of the stores loads the kernel's codec and record classes only with the
first record read or written (``ghapp.store.base._load_kernel``)."""

from __future__ import annotations

import ast
import inspect

from ghapp.store import base

LAZY = {
    "dump_fact",
    "dump_record",
    "load_fact",
    "load_record",
    "extra_keys",
    "fact_key",
    "is_extra_key",
    "EventRow",
    "Queued",
    "index_of",
}


def test_every_function_using_the_kernel_loads_it_first() -> None:
    """A function that used one of the names before ``_load_kernel`` bound them would
    fail with a NameError, but only when it is the first to touch a record."""
    tree = ast.parse(inspect.getsource(base))
    (loader,) = [
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_load_kernel"
    ]
    bound = {
        a.asname or a.name
        for n in ast.walk(loader)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    assert bound == LAZY
    users = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or node is loader:
            continue
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in LAZY}
        if not used:
            continue
        users.append(node.name)
        first = node.body[1] if ast.get_docstring(node) else node.body[0]
        assert ast.unparse(first) == "if not _kernel_loaded:\n    _load_kernel()", node.name
    assert "query" in users and "append" in users
