"""The core never imports textual: the CLI and every core module load without it (checked
in a fresh interpreter, where sys.modules shows everything that was imported)."""
from __future__ import annotations

import json
import subprocess
import sys

CORE = ["hpcwizard.cli", "hpcwizard.plan", "hpcwizard.apply", "hpcwizard.export",
        "hpcwizard.detect", "hpcwizard.catalog", "hpcwizard.ops", "hpcwizard.record",
        "hpcwizard.choices", "hpcwizard.diagnose", "hpcwizard.facts", "hpcwizard.validate"]


def imported_after(modules):
    code = ("import json, sys\n"
            + "".join(f"import {m}\n" for m in modules)
            + "print(json.dumps(sorted(sys.modules)))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout))


def test_core_does_not_import_textual():
    mods = imported_after(["hpcwizard.cli", "hpcwizard.plan", "hpcwizard.apply",
                           "hpcwizard.export", "hpcwizard.detect"])
    assert "hpcwizard.cli" in mods and "hpcwizard.detect" in mods  # the imports happened
    assert "textual" not in mods
    assert not [m for m in mods if m.startswith(("textual.", "hpcwizard.screens"))]


def test_every_core_module_alone_does_not_import_textual():
    for module in CORE:
        mods = imported_after([module])
        assert module in mods
        assert "textual" not in mods, f"{module} imports textual"


def test_the_probe_itself_sees_textual():
    """The check can fail: importing textual does show up in sys.modules."""
    assert "textual" in imported_after(["textual"])


# --- no import cycle among the product's modules ------------------------------------------
# The graph counts every import the code can run: at module level and inside functions (a
# lazy import hides a cycle, it does not remove it). Only imports under `if TYPE_CHECKING:`
# never run. The package layout is pyproject's: wizard/ is hpcwizard, screens/ its screens.

import ast  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"hpcwizard": ROOT / "wizard", "hpcwizard.screens": ROOT / "screens"}


def product_modules():
    """module name -> its file, for every .py of wizard/ and screens/."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("").parts
            if "programs" in rel:  # verify's test programs run on the instances, not in here
                continue
            parts = rel[:-1] if rel[-1] == "__init__" else rel
            found[".".join((package, *parts))] = path
    return found


def _runs(node, parents):
    """False for an import under `if TYPE_CHECKING:` (never executed)."""
    for p in parents:
        if isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test):
            return False
    return True


def imports_of(name, path, modules):
    """The product modules `name` imports, anywhere in its body."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    out = set()

    def visit(node, parents):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and _runs(node, parents):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = ".".join(here[:len(here) - node.level + 1]) if node.level else ""
                mod = ".".join(p for p in (base, node.module or "") if p)
                subs = [f"{mod}.{a.name}" for a in node.names]
                # `from pkg import mod` imports the submodule; any other name is pkg's own
                targets = subs + ([mod] if any(t not in modules for t in subs) else [])
            for t in targets:
                if t in modules and t != name:
                    out.add(t)
                    # importing a.b.c runs a.b's __init__ first, unless it is the importer's own
                    parts = t.split(".")
                    for i in range(2, len(parts)):
                        parent = ".".join(parts[:i])
                        if parent in modules and not (name + ".").startswith(parent + "."):
                            out.add(parent)
        for child in ast.iter_child_nodes(node):
            visit(child, parents + [node])

    visit(tree, [])
    return out


def import_cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return comps


def product_graph():
    modules = product_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def test_the_product_has_no_import_cycle():
    graph = product_graph()
    assert len(graph) > 60 and graph["hpcwizard.cli"]  # the walk found the product
    cycles = import_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


# What the renderers may import besides each other: the Job and small leaf helpers. The
# planner, the facts and every front end are above them.
RENDER_MAY_IMPORT = {"hpcwizard", "hpcwizard.job", "hpcwizard.i18n", "hpcwizard.ops",
                     "hpcwizard.recipes", "hpcwizard.runtime", "hpcwizard.hosts",
                     "hpcwizard.validate", "hpcwizard.inputs", "hpcwizard.vocab",
                     "hpcwizard.compat", "hpcwizard.proc", "hpcwizard.safe_text"}


def test_the_renderers_import_the_job_and_nothing_above_it():
    graph = product_graph()
    render = {m for m in graph if m.startswith("hpcwizard.render")}
    assert {"hpcwizard.render.launch", "hpcwizard.render.slurm"} <= render
    reached, todo = set(), list(render)
    while todo:
        for dep in graph[todo.pop()]:
            if dep not in reached:
                reached.add(dep)
                todo.append(dep)
    assert "hpcwizard.job" in reached
    assert reached - render <= RENDER_MAY_IMPORT, sorted(reached - render - RENDER_MAY_IMPORT)


def test_the_cycle_finder_sees_a_cycle_through_a_function_level_import(tmp_path):
    """The check can fail: a lazy import closing a loop is found, a TYPE_CHECKING one is not."""
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from .c import x\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nfrom .a import y\n")
    (tmp_path / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from .a import z\nfrom . import e\n")
    (tmp_path / "e.py").write_text("import pkg.d\n")
    modules = {f"pkg.{n}": tmp_path / f"{n}.py" for n in "abcde"}
    graph = {n: imports_of(n, p, modules) for n, p in modules.items()}
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.d", "pkg.e"]]
    (tmp_path / "e.py").write_text("")
    graph = {n: imports_of(n, p, modules) for n, p in modules.items()}
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


# --- a function-level import of the product is an exception, each with its reason ----------
# An import inside a function hides a dependency from the reader. Allowed only where loading
# it up front would slow what users feel: `hpcwizard --version`, the wizard's first frame
# (drawn before Textual loads), detection. Keyed by (module, function).

LAZY_IMPORTS_ALLOWED = {
    ("hpcwizard.cli", "command"): ("a command loads its own module only: --version and the "
                                   "wizard's first frame load no command, detect no planner"),
    ("hpcwizard.cli", "error"): "the wizard's start builds no parser",
    ("hpcwizard.cli", "main"): "the wizard's start builds no parser",
    ("hpcwizard.cli", "_add_choices"): "--version and detect build no choice options",
    ("hpcwizard.cli", "_export_args"): "--version and detect build no choice options",
    ("hpcwizard.cli", "_start_tui"): "the core never imports screens/ (nor textual)",
    ("hpcwizard.detect.commands", "start"): "mirrors loads while the first probes run",
    **{("hpcwizard.screens.app", f): "a screen loads when first shown" for f in (
        "goto_choose", "choose", "take_preset", "configure_here", "finish_run")},
    # The first screen's module (app, widgets, system) imports no planner, apply, session or
    # verify: together they would hold Textual's first frame back by about 0.15 s.
    **{("hpcwizard.screens.app", f): "Textual's first frame waits for none of the core" for f in (
        "interrupt", "detect_worker", "_load_catalog", "_build", "runner_for", "_ask_sudo",
        "start_run", "start_verify", "verify_worker", "on_verify_ended",
        "_plans_in_this_language")},
    **{("hpcwizard.screens.widgets", f): "Textual's first frame waits for no export or session"
       for f in ("__init__", "write")},
}


def function_level_imports(name, path, modules):
    """(function, imported product module) for every import of the product inside a
    function, TYPE_CHECKING ones aside."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []

    def visit(node, parents, function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = function or node.name
        if function and isinstance(node, (ast.Import, ast.ImportFrom)) and _runs(node, parents):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = ".".join(here[:len(here) - node.level + 1]) if node.level else ""
                targets = [".".join(p for p in (base, node.module or "") if p)]
            found.extend((function, t) for t in targets
                         if t == "hpcwizard" or t.startswith("hpcwizard."))
        for child in ast.iter_child_nodes(node):
            visit(child, parents + [node], function)

    visit(tree, [], None)
    return found


def test_every_function_level_import_of_the_product_is_allowed_with_its_reason():
    modules = product_modules()
    lazy = {(name, function, target) for name, path in modules.items()
            for function, target in function_level_imports(name, path, modules)}
    assert ("hpcwizard.cli", "_start_tui", "hpcwizard.screens.app") in lazy  # the scan sees them
    unexplained = sorted(f"{n}.{f}: imports {t}" for n, f, t in lazy
                         if (n, f) not in LAZY_IMPORTS_ALLOWED)
    assert not unexplained, ("import these at module level, or add them with their reason to "
                             "LAZY_IMPORTS_ALLOWED:\n" + "\n".join(unexplained))
    stale = set(LAZY_IMPORTS_ALLOWED) - {(n, f) for n, f, _ in lazy}
    assert not stale, f"allowed but no longer lazy: {sorted(stale)}"


def test_the_lazy_import_scan_sees_imports_in_functions_only(tmp_path):
    """The check can fail: an import in a method is found, module-level and TYPE_CHECKING
    ones are not."""
    (tmp_path / "m.py").write_text(
        "from typing import TYPE_CHECKING\nfrom . import a\nif TYPE_CHECKING:\n"
        "    from .b import B\nclass C:\n    def go(self):\n        from .c import x\n"
        "        def inner():\n            import hpcwizard.d\n        import json\n")
    found = function_level_imports("hpcwizard.m", tmp_path / "m.py", {})
    assert found == [("go", "hpcwizard.c"), ("go", "hpcwizard.d")]
