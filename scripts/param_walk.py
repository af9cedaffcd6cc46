"""Follow one parameter from a function through every call it is passed to, by reading the source.

usage: python scripts/param_walk.py FILE:FUNCTION:PARAM [--quiet]
e.g.   python scripts/param_walk.py ingest/driver/job.py:prepare_job:cfg

What a newcomer does by hand, done with the `ast` module (no import of the code, no third-party
tool). The rules:

- Passing on. A call passes the parameter on when the bare name is one of its arguments, by
  position or by keyword (`f(cfg)`, `f(x, config=cfg)`). Reading a field (`cfg.hdu`) or
  calling a method on it (`cfg.replace(...)`) does not: the callee is then given a value, not the
  object, and the reader need not follow the object there. A name bound to the parameter by a
  plain assignment (`config = cfg`) is the parameter too.
- Resolving. A callee is a function of the same module, or a name or `module.name` imported
  (at the top or inside a function) from a module of the package, followed through re-exports
  in a package's `__init__.py`; `Class.method` is named as such in FILE:FUNCTION. A class
  called with the parameter is a stop, followed into its `__init__` if it defines one. A callee
  outside the package (`dataclasses.replace`) is not a stop; a callee not resolved (a method of
  an object, a function held in a variable) is counted apart as unresolved.
- The parameter is followed under the callee's own name for it; each (function, parameter) is
  walked once, in the order the source calls them (depth first: the walk a reader makes).
- Stops: the functions so visited, the start included, in that order.
- Climbs: steps of that walk from a stop to the next one in a higher layer, by the layer order
  of .importlinter's `layers` contract (a reader going back up a floor: the orchestrator calls
  into config, then sky, then config again is one climb, from sky up to config). The first
  step into a layer below is no climb.
- Returns: steps of the walk into a module that the walk was in before and has left since
  (config/settings.py entered three times is two returns).
"""
from __future__ import annotations

import argparse
import ast
import builtins
import configparser
import os
import sys

PACKAGE = "ingest"


class Tree:
    """The package's modules as ASTs, read once each, and its layer order."""

    def __init__(self, root: str):
        self.root = root
        self.modules: dict[str, ast.Module | None] = {}
        self.layers = read_layers(os.path.join(root, ".importlinter"))

    def path(self, module: str) -> str | None:
        base = os.path.join(self.root, *module.split("."))
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
        return None

    def ast(self, module: str) -> ast.Module | None:
        if module not in self.modules:
            path = self.path(module)
            self.modules[module] = ast.parse(open(path).read(), path) if path else None
        return self.modules[module]

    def layer(self, module: str) -> int:
        """The index of the module's layer (0 the top); a module not named is taken as a leaf."""
        parts = module.split(".")
        name = parts[1] if len(parts) > 1 else parts[0]
        for i, names in enumerate(self.layers):
            if name in names:
                return i
        return len(self.layers)


def read_layers(path: str) -> list[set[str]]:
    """The `layers` of the contract of type layers in .importlinter, top first."""
    parser = configparser.ConfigParser()
    parser.read(path)
    for section in parser.sections():
        if parser[section].get("type", "").strip() == "layers":
            lines = [ln.strip() for ln in parser[section]["layers"].splitlines() if ln.strip()]
            return [{name.strip() for name in ln.split("|")} for ln in lines]
    raise SystemExit(f"{path}: no contract of type layers")


def imports_of(tree: ast.Module, module: str) -> dict[str, tuple[str, str | None]]:
    """Every name the module imports, anywhere in it: alias -> (module, name or None for a module)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package
                parts = module.split(".")[:-node.level]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                names[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = (alias.name, None)
                else:
                    names[alias.name.split(".")[0]] = (alias.name.split(".")[0], None)
    return names


def definitions(tree: ast.Module) -> dict[str, ast.AST]:
    """The module's top-level functions and classes, and each class's methods as Class.method."""
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"{node.name}.{item.name}"] = item
    return found


def resolve(tree_: Tree, module: str, name: str, depth: int = 0):
    """(module, definition) of `name` as seen from `module`, through imports and re-exports."""
    if depth > 10 or not (module == PACKAGE or module.startswith(PACKAGE + ".")):
        return None
    tree = tree_.ast(module)
    if tree is None:
        return None
    defs = definitions(tree)
    if name in defs:
        return module, defs[name]
    imported = imports_of(tree, module).get(name)
    if imported is None:
        return None
    source, original = imported
    if original is None:
        return None
    if tree_.path(f"{source}.{original}"):  # a submodule, not a function
        return None
    return resolve(tree_, source, original, depth + 1)


def callee_of(tree_: Tree, module: str, call: ast.Call):
    """(module, qualified name, definition) of what `call` calls, or None when not resolved."""
    func = call.func
    if isinstance(func, ast.Name):
        found = resolve(tree_, module, func.id)
        return (found[0], qualified(tree_, found), found[1]) if found else None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        imported = imports_of(tree_.ast(module), module).get(func.value.id)
        if imported is None:
            return None
        source, original = imported
        target = source if original is None else f"{source}.{original}"
        if tree_.path(target):
            found = resolve(tree_, target, func.attr)
            return (found[0], qualified(tree_, found), found[1]) if found else None
    return None


def qualified(tree_: Tree, found) -> str:
    module, node = found
    for name, value in definitions(tree_.ast(module)).items():
        if value is node:
            return name
    return node.name


def parameter_names(func: ast.FunctionDef) -> tuple[list[str], set[str]]:
    """(positional parameter names in order, keyword-capable names)."""
    args = func.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    return positional, set(positional[len(args.posonlyargs):]) | {a.arg for a in args.kwonlyargs}


def received_as(func: ast.FunctionDef, call: ast.Call, names: set[str], method: bool) -> list[str]:
    """The callee's parameter names that receive the tracked object in `call`."""
    positional, keywords = parameter_names(func)
    if method and positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    got = []
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Name) and arg.id in names and i < len(positional):
            got.append(positional[i])
    for kw in call.keywords:
        if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id in names and kw.arg in keywords:
            got.append(kw.arg)
    return got


def aliases(func: ast.AST, param: str) -> set[str]:
    """The parameter and every name bound to it by a plain assignment in the function."""
    names = {param}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in names:
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def calls_passing(func: ast.AST, names: set[str]) -> list[ast.Call]:
    """The calls in the function's body (nested functions included) given a tracked name, in
    source order."""
    found = []
    for node in ast.walk(func):
        if isinstance(node, ast.Call):
            given = list(node.args) + [kw.value for kw in node.keywords]
            if any(isinstance(a, ast.Name) and a.id in names for a in given):
                found.append(node)
    return sorted(found, key=lambda c: (c.lineno, c.col_offset))


def walk(tree_: Tree, module: str, name: str, param: str):
    """The stops in the order a reader visits them, and the unresolved calls."""
    start = resolve(tree_, module, name)
    if start is None:
        raise SystemExit(f"{module}: no function {name}")
    stops, seen, unresolved = [], set(), []

    def visit(mod: str, qual: str, node: ast.AST, par: str):
        if (mod, qual, par) in seen:
            return
        seen.add((mod, qual, par))
        stops.append((mod, qual))
        if isinstance(node, ast.ClassDef):
            init = definitions(tree_.ast(mod)).get(f"{node.name}.__init__")
            if init is None:
                return
            node, qual = init, f"{node.name}.__init__"
        names = aliases(node, par)
        for call in calls_passing(node, names):
            target = callee_of(tree_, mod, call)
            if target is None:
                if not external(tree_, mod, call):
                    unresolved.append(f"{mod}:{getattr(call, 'lineno', 0)}: {ast.unparse(call.func)}")
                continue
            cmod, cqual, cnode = target
            if isinstance(cnode, ast.ClassDef):
                init = definitions(tree_.ast(cmod)).get(f"{cnode.name}.__init__")
                if init is None:
                    if (cmod, cqual, "") not in seen:
                        seen.add((cmod, cqual, ""))
                        stops.append((cmod, cqual))
                    continue
                for received in received_as(init, call, names, True):
                    visit(cmod, cqual, cnode, received)
                continue
            for received in received_as(cnode, call, names, "." in cqual):
                visit(cmod, cqual, cnode, received)

    visit(start[0], qualified(tree_, start), start[1], param)
    return stops, unresolved


def external(tree_: Tree, module: str, call: ast.Call) -> bool:
    """Is the callee a name imported from outside the package, or a builtin?"""
    func = call.func
    head = func
    while isinstance(head, ast.Attribute):
        head = head.value
    if not isinstance(head, ast.Name):
        return False
    imported = imports_of(tree_.ast(module), module).get(head.id)
    if imported is not None:
        return not imported[0].startswith(PACKAGE)
    return hasattr(builtins, head.id)


def figures(tree_: Tree, stops):
    """(climbs, returns) of the walk: see the module's docstring."""
    climbs = returns = 0
    left = set()
    for (a, _), (b, _) in zip(stops, stops[1:]):
        if tree_.layer(b) < tree_.layer(a):
            climbs += 1
        if b != a:
            if b in left:
                returns += 1
            left.add(a)
    return climbs, returns


def module_of(root: str, path: str) -> str:
    rel = os.path.relpath(os.path.abspath(path), root)
    parts = rel[:-3].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="FILE:FUNCTION:PARAM, e.g. ingest/driver/job.py:prepare_job:cfg")
    parser.add_argument("--root", default=None, help="the directory holding the package (default: FILE's)")
    parser.add_argument("--quiet", action="store_true", help="the figures only")
    args = parser.parse_args(argv)
    path, function, param = args.target.rsplit(":", 2)
    root = args.root or os.path.abspath(path).split(os.sep + PACKAGE + os.sep)[0]
    tree_ = Tree(root)
    stops, unresolved = walk(tree_, module_of(root, path), function, param)
    climbs, returns = figures(tree_, stops)
    if not args.quiet:
        for mod, qual in stops:
            print(f"  L{tree_.layer(mod):<2} {mod}:{qual}")
        for line in unresolved:
            print(f"  unresolved: {line}")
    modules = len({m for m, _ in stops})
    print(f"{args.target}: {len(stops)} stops in {modules} modules, {climbs} climbs, {returns} returns, "
          f"{len(unresolved)} unresolved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
