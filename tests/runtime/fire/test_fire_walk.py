"""The shape of a fire's walk (issue 21): one task per claimed fire, entering firing.py thrice.

Read from the code itself (`ast`): `Firing._walk` takes a claimed fire through wait → admit →
run → settle → record calling two helpers of its own, `_run` and `_settle`, once each, and
those two call only into other modules. A new helper on the walk, or a second call site,
makes the walk re-enter firing.py and fails here.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from runtime.fire import firing
from runtime.fire.claimed import Fire


def _method(name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(firing.Firing, name))))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    return node


def _own_calls(name: str) -> list[str]:
    """The methods of `Firing` that `name` calls (`self.<method>(…)`), in order."""
    methods = {m for m, _ in inspect.getmembers(firing.Firing, inspect.isfunction)}
    return [
        node.func.attr
        for node in ast.walk(_method(name))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
        and node.func.attr in methods
    ]


def test_the_walk_calls_its_two_helpers_once_each_and_they_call_none():
    assert sorted(_own_calls("_walk")) == ["_run", "_settle"]
    assert _own_calls("_run") == [] and _own_calls("_settle") == []


def test_a_claimed_fire_is_one_value_carrying_its_way_to_its_record():
    fields = set(Fire.__struct_fields__)
    assert {"request", "run_id", "term", "peer", "token", "steps", "outcome", "reason"} <= fields
    assert not Fire.__struct_config__.frozen  # one value, filled in on its way: no re-wraps
