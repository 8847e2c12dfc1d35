"""The code base's shape (issue 31): the layers of docs/architecture.md hold (import-linter's contract in
pyproject.toml), no module imports itself back through others, and every registry finds every name
registered anywhere in the package."""
from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx

from sage.registry import Registry

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "sage"


def test_the_layer_contracts_hold():
    # The console script's own function, run by this interpreter (a virtualenv layered on another, as
    # scripts/test_transformers_newest.sh makes, has no lint-imports script of its own).
    lint = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", lint], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "1 kept, 0 broken" in proc.stdout


def test_no_import_cycles_counting_imports_inside_functions():
    graph = grimp.build_graph("sage", cache_dir=None)  # grimp sees function-level imports too
    edges = nx.DiGraph()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            edges.add_edge(module, imported)
    cycles = [c for c in nx.simple_cycles(edges) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles[:5]}"
    assert edges.number_of_edges() > 300  # the graph really is the package's (about 400 imports)


def _registrations() -> list[tuple[str, str, str]]:
    """(module, registry variable, name) for every `@REGISTRY.register("name")` in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register"
                    and isinstance(node.func.value, ast.Name) and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.append((module, node.func.value.id, node.args[0].value))
    return found


def test_every_registered_name_is_found_by_its_registry():
    """A name registered in a module the registry does not import is invisible until something else
    imports that module: each registration sits in the registry's own module or is listed in its
    lazy_modules, and each lazy entry's module really registers that name."""
    registrations = _registrations()
    assert len(registrations) >= 30
    seen_registries = set()
    for module, variable, name in registrations:
        mod = importlib.import_module(module)
        registry = getattr(mod, variable)
        assert isinstance(registry, Registry), (module, variable)
        seen_registries.add(id(registry))
        lazy = registry._lazy.get(name)
        defined_in = _defining_module(registry)
        assert module == defined_in or lazy == module, (
            f"{registry.kind} {name!r} is registered in {module} but its registry ({defined_in}) "
            f"lists {lazy!r}: add it to lazy_modules")
    for registry in _all_registries():
        for name, module in registry._lazy.items():
            importlib.import_module(module)
            assert name in registry._items, f"{registry.kind} {name!r}: {module} does not register it"
    assert len(seen_registries) >= 5


def _all_registries() -> list[Registry]:
    out = []
    for module, _variable, _name in _registrations():
        for value in vars(importlib.import_module(module)).values():
            if isinstance(value, Registry) and all(value is not r for r in out):
                out.append(value)
    return out


def _defining_module(registry: Registry) -> str:
    """The module that creates the registry (`NAME: Registry[...] = Registry(` or `NAME = Registry(`)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "Registry(" not in text:
            continue
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for name, value in vars(importlib.import_module(module)).items():
            if value is registry and (f"{name}: Registry" in text or f"{name} = Registry(" in text):
                return module
    raise AssertionError(f"no module creates the {registry.kind} registry")


def test_docs_architecture_matches_the_code():
    """docs/architecture.md draws the contract's layers, in order, and names only modules that exist."""
    import tomllib

    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    contract = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    layers = contract["contracts"][0]["layers"]
    drawing = doc.split("## Layers", 1)[1].split("```")[1]
    drawn = [line.split("   ")[0].strip() for line in drawing.splitlines()
             if line.strip() and not line.strip().startswith("│")]
    drawn = [" ".join(d.replace("(core)", "").split()) for d in drawn]
    assert drawn == [" ".join(layer.split()) for layer in layers]
    paths = set(re.findall(r"`(sage/[\w/.]*)`", doc))
    assert len(paths) > 40
    assert not [p for p in paths if not (REPO / p).exists()], "docs/architecture.md names missing modules"


# The only libraries imported inside functions, and why: importing them costs a large share of a
# second or more (most pull in torch), or they are optional extras. Everything else is imported at
# the top of its module, so the import graph grimp and import-linter see is the real one.
HEAVY_LIBRARIES = {
    **dict.fromkeys(("torch", "transformers", "sentence_transformers", "bert_score", "peft", "accelerate",
                     "parascore", "lm_polygraph", "bitsandbytes", "safetensors"), "imports torch"),
    **dict.fromkeys(("vllm", "ray", "onnxruntime", "onnx", "llama_cpp", "gguf", "openai", "psutil", "datasets"),
                    "optional extra or slow to import"),
    **dict.fromkeys(("pandas", "pyarrow", "scipy", "sklearn", "statsmodels", "matplotlib", "networkx", "nltk",
                     "rouge_score", "krippendorff", "huggingface_hub", "httpx", "rich", "tqdm", "filelock"),
                    "0.05-1 s to import; `sage --help` and light commands never need them"),
}


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _imported(module: str, node) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:  # relative: resolve against the package
        base = module.split(".")[: len(module.split(".")) - node.level + (1 if module.endswith("__init__") else 0)]
        return [".".join(base + ([node.module] if node.module else []))]
    return [f"{node.module}.{a.name}" for a in node.names]


def test_imports_inside_functions_are_only_of_heavy_libraries():
    """No function-level imports except of heavy libraries (HEAVY_LIBRARIES says why each one), or of
    sage modules that import one at their top; `sage/__init__.py`'s lazy re-exports (PEP 562) aside."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    top_level: dict[str, set[str]] = {}
    inner: list[tuple[str, int, str]] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_function = {id(n) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
        top_level[name] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _imported(name, node):
                    if id(node) in in_function:
                        inner.append((name, node.lineno, target))
                    else:
                        top_level[name].add(target)

    def sage_module(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    def heavy(target: str, seen: set[str]) -> bool:
        if not target.startswith("sage"):
            return target.split(".")[0] in HEAVY_LIBRARIES
        module = sage_module(target)
        if module is None or module in seen:
            return False
        seen.add(module)
        parents = [module.rsplit(".", i)[0] for i in range(1, module.count("."))]  # packages run their __init__
        return any(heavy(t, seen) for t in top_level[module] | set(parents))

    light = [f"{m}:{line} imports {t}" for m, line, t in inner if m != "sage" and not heavy(t, set())]
    assert not light, "import these at the top of the module (they are light): " + "; ".join(light[:10])
    assert len(inner) > 50  # the check sees the function-level imports there are
