"""The dependency graph of csrc/, checked: no cycle, and no layer names a
higher one.

A unit is a .c file with its .h (compat.h and state.h are units of their
own).  Unit A depends on unit B when a file of A includes B's header, or
names something that only B defines: a function, a macro, a type, an enum
constant or a variable exported by B (a function defined without `static`
in B's .c, or anything B's header declares).  `static` functions of a .c
file are its own and count for no other unit.

    python3 scripts/check_layers.py [csrc]        (run by scripts/lint.sh)

Prints the layers with each unit's dependencies; exits 1 naming every
cycle and every edge that points up (from a unit to one of a higher
layer), else 0.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# The layers, lowest first: a unit may name units of its own layer or of
# lower ones, never of a higher one (and the graph must have no cycle,
# within a layer too).
LAYERS: list[tuple[str, list[str]]] = [
    ("ground: data and version shims", ["state", "compat"]),
    ("arguments, __slots__, the method descriptor", ["args", "slots", "async_method"]),
    ("random source", ["random_source"]),
    ("strategies", ["strategies"]),
    # One unit per extra (its objects, or its steps of a call), the block a
    # Retry holds, and the unit that ties them to a Retry, in that order:
    # within the layer, no cycle.
    (
        "extras: budget, stats; the block; deadline, writes policy, hooks; the tie",
        ["budget", "stats", "block", "deadline", "writes", "hooks", "extras"],
    ),
    ("retry core", ["retry_core"]),
    (
        "the Retry types",
        ["retry", "async_call", "async_coro", "async_retry", "cluster", "call_bounds"],
    ),
    ("module", ["module"]),
]

IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)\.h"', re.M)
# Definitions at the start of a line, in the project's style (the return
# type on the line above the name).
FUNCTION_DEF = re.compile(r"^([A-Za-z_]\w*)\s*\(", re.M)
STATIC_DEF = re.compile(r"^static\b[^\n;{]*\n([A-Za-z_]\w*)\s*\(", re.M)
PROTOTYPE = re.compile(r"\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*;")
MACRO = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)", re.M)
TYPEDEF_END = re.compile(r"}\s*([A-Za-z_]\w*)\s*;")
TYPEDEF_SIMPLE = re.compile(r"^typedef\b[^;{]*?\b([A-Za-z_]\w*)\s*;", re.M)
TYPEDEF_FUNC = re.compile(r"^typedef\b[^;{]*\(\s*\*\s*([A-Za-z_]\w*)\s*\)", re.M)
TAG = re.compile(r"\b(?:struct|enum|union)\s+([A-Za-z_]\w*)\s*\{")
ENUM_BODY = re.compile(r"\benum\b[^{;]*\{([^}]*)\}", re.S)
EXTERN = re.compile(r"^extern\b[^;]*?\b([A-Za-z_]\w*)\s*(?:\[\s*\])?\s*;", re.M)


def strip(text: str) -> str:
    """The code without comments and string literals."""
    return STRING.sub('""', COMMENT.sub(" ", text))


def top_level(code: str) -> str:
    """The code with the insides of every brace pair left out (function
    bodies, struct members, initialisers): what stays is declarations."""
    out, depth = [], 0
    for char in code:
        if char == "{":
            depth += 1
        if depth == 0 or char in "{}":
            out.append(char)
        if char == "}":
            depth -= 1
    return "".join(out)


def exported(path: Path, code: str) -> set[str]:
    """The names a file defines for other units (CPython's own, Py* and
    _Py*, are nobody's here)."""
    names: set[str] = set()
    if path.suffix == ".h":
        names |= set(FUNCTION_DEF.findall(code)) | set(PROTOTYPE.findall(top_level(code)))
        names |= set(TYPEDEF_END.findall(code)) | set(TYPEDEF_SIMPLE.findall(code))
        names |= set(TYPEDEF_FUNC.findall(code)) | set(TAG.findall(code))
        names |= set(EXTERN.findall(code)) | set(MACRO.findall(code))
        for body in ENUM_BODY.findall(code):
            names |= {item.split("=")[0].strip() for item in body.split(",") if item.strip()}
    else:
        # Non-static functions and variables of a .c file.
        static = set(STATIC_DEF.findall(code))
        names |= set(FUNCTION_DEF.findall(code)) - static
    guard = {n for n in names if n.endswith("_H") and n.startswith("RBC_")}
    cpython = {n for n in names if n.startswith(("Py", "_Py"))}
    return {n for n in names if n and n.isidentifier()} - guard - cpython


def graph(root: Path) -> dict[str, set[str]]:
    files: dict[str, list[Path]] = {}
    for path in sorted(root.glob("*.[ch]")):
        files.setdefault(path.stem, []).append(path)
    code = {path: strip(path.read_text()) for paths in files.values() for path in paths}
    owners: dict[str, set[str]] = {}
    for unit, paths in files.items():
        for path in paths:
            for name in exported(path, code[path]):
                owners.setdefault(name, set()).add(unit)
    deps: dict[str, set[str]] = {unit: set() for unit in files}
    for unit, paths in files.items():
        for path in paths:
            text = path.read_text()
            deps[unit] |= {h for h in INCLUDE.findall(COMMENT.sub(" ", text)) if h in files}
            for name in set(IDENT.findall(code[path])):
                others = owners.get(name, set()) - {unit}
                # A name several other units define is none's alone.
                if len(others) == 1 and unit not in owners.get(name, set()):
                    deps[unit] |= others
        deps[unit].discard(unit)
    return deps


def cycles(deps: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        for dep in sorted(deps[unit]):
            if dep not in index:
                visit(dep)
                low[unit] = min(low[unit], low[dep])
            elif dep in stack:
                low[unit] = min(low[unit], index[dep])
        if low[unit] == index[unit]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == unit:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for unit in sorted(deps):
        if unit not in index:
            visit(unit)
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else Path(__file__).resolve().parents[1] / "csrc")
    deps = graph(root)
    level = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}
    problems = []
    unplaced = sorted(set(deps) - set(level))
    if unplaced:
        problems.append(f"units in no layer (add them to LAYERS): {', '.join(unplaced)}")
    for i, (title, units) in enumerate(LAYERS):
        print(f"{i} {title}")
        for unit in units:
            if unit in deps:
                below = ", ".join(sorted(deps[unit])) or "-"
                print(f"    {unit}: {below}")
    for unit, targets in sorted(deps.items()):
        for target in sorted(targets):
            if unit in level and target in level and level[target] > level[unit]:
                problems.append(
                    f"{unit} (layer {level[unit]}) names {target} (layer {level[target]})"
                )
    for component in cycles(deps):
        problems.append("cycle: " + " <-> ".join(component))
    for problem in problems:
        print(f"check_layers: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
