"""A program's source checked without running it: what publishing a program requires.

Owns `inspect_source`: compiles the text, requires a top-level `def main(args)` (plain or
`async`), reads `__any_tool__` from a top-level literal assignment, and returns
`ProgramMeta`; `InvalidProgram` names the line and the reason. Pure: it never executes
the program, fetches nothing and reads no clock, so the space checks a publish with the
same rule the device loads by.
"""

from __future__ import annotations

import ast
import hashlib
from types import CodeType

import msgspec

MAX_SOURCE_BYTES = 256 * 1024
ANY_TOOL = "__any_tool__"


class InvalidProgram(ValueError):
    """A source text that cannot be published; the message says where and why."""


class ProgramMeta(msgspec.Struct, frozen=True, kw_only=True):
    main_is_async: bool
    any_tool: bool
    sha256: str
    size: int  # bytes of UTF-8 source


def inspect_source(source: str, *, filename: str = "<program>") -> ProgramMeta:
    """Check a program without running it; raise `InvalidProgram` naming line and reason."""
    meta, _ = inspect_compiled(source, filename)
    return meta


def inspect_compiled(source: str, filename: str) -> tuple[ProgramMeta, CodeType]:
    if not isinstance(source, str):
        raise InvalidProgram(f"source must be text, got {type(source).__name__}")
    data = source.encode("utf-8", errors="surrogatepass")
    if len(data) > MAX_SOURCE_BYTES:
        raise InvalidProgram(f"source is {len(data)} bytes, the limit is {MAX_SOURCE_BYTES}")
    tree = _parse(source, filename)
    main = _find_main(tree)
    meta = ProgramMeta(
        main_is_async=isinstance(main, ast.AsyncFunctionDef),
        any_tool=_any_tool(tree),
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
    )
    return meta, compile(tree, filename, "exec", dont_inherit=True)


def _parse(source: str, filename: str) -> ast.Module:
    try:
        tree = ast.parse(source, filename)  # compile(..., PyCF_ONLY_AST), typed as a Module
        compile(tree, filename, "exec", dont_inherit=True)  # some errors appear only here
    except SyntaxError as exc:
        raise InvalidProgram(_syntax_message(exc)) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise InvalidProgram(f"source does not compile: {exc}") from None
    return tree


def _syntax_message(exc: SyntaxError) -> str:
    if not exc.lineno:
        return f"syntax error: {exc.msg}"
    where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
    text = (exc.text or "").strip()
    shown = f": {text!r}" if text else ""
    return f"syntax error at {where}: {exc.msg}{shown}"


def _find_main(tree: ast.Module) -> ast.FunctionDef | ast.AsyncFunctionDef:
    mains = [
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == "main"
    ]
    if not mains:
        raise InvalidProgram("no top-level `def main(args)` (or `async def main(args)`)")
    main = mains[-1]  # the last definition wins, as when the module runs
    if not _takes_one_arg(main.args):
        raise InvalidProgram(f"line {main.lineno}: `main` must accept exactly one argument, args")
    return main


def _takes_one_arg(a: ast.arguments) -> bool:
    positional = len(a.posonlyargs) + len(a.args)
    required = positional - len(a.defaults)
    kw_required = sum(d is None for d in a.kw_defaults)
    return required <= 1 and (positional >= 1 or a.vararg is not None) and kw_required == 0


def _any_tool(tree: ast.Module) -> bool:
    value = False
    for node in tree.body:
        target, expr = _assignment(node)
        if target != ANY_TOOL:
            continue
        try:
            found = ast.literal_eval(expr) if expr is not None else None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            found = None
        if not isinstance(found, bool):
            raise InvalidProgram(f"line {node.lineno}: {ANY_TOOL} must be True or False")
        value = found
    return value


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    """The simple name a top-level statement assigns, and the value it assigns."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        return (target.id if isinstance(target, ast.Name) else None), node.value
    if isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None
