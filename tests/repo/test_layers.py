"""The layers stay layers: no import cycle among the package's modules (lazy
imports inside functions included), no circle of calls among the C core's
files, benchmarks that use the library only through its public names, and
no source file (library or benchmark) so long that it holds several jobs."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "src" / "shmstream"
CORE = ROOT / "src" / "core"
BINDINGS = ROOT / "src" / "bindings"
BENCH = ROOT / "benchmarks"

#: Lines above which a source file has several jobs (generated stubs and
#: recorded benchmark results are not code a person writes).
MAX_LINES = 800


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(u: str) -> None:
        color[u] = 1
        stack.append(u)
        for v in sorted(edges[u]):
            if color.get(v) == 1:
                found.append([*stack[stack.index(v) :], v])
            elif not color.get(v):
                visit(v)
        stack.pop()
        color[u] = 2

    for u in sorted(edges):
        if not color.get(u):
            visit(u)
    return found


# ---- Python -----------------------------------------------------------------------


def _python_modules() -> dict[str, Path]:
    mods = {}
    for path in PKG.rglob("*.py"):
        name = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _extension_modules() -> set[str]:
    """The compiled modules, as CMakeLists.txt lists them (one source each)."""
    text = (ROOT / "CMakeLists.txt").read_text()
    listed = re.findall(r"(?:set\(|list\(APPEND )SHMSTREAM_MODULES ([^)]*)\)", text)
    assert listed, "CMakeLists.txt lists no SHMSTREAM_MODULES"
    return {f"shmstream.{m}" for group in listed for m in group.split()}


def test_each_binding_source_is_one_listed_extension_and_the_package_is_python():
    # Each .cpp of src/bindings is the extension of its name, built from the explicit
    # list in CMakeLists.txt (a stray .cpp is neither built silently nor left out); the
    # package folder holds Python and stubs only.
    sources = {f"shmstream.{p.stem}" for p in BINDINGS.glob("*.cpp")}
    assert sources == _extension_modules()
    foreign = [p.name for p in PKG.rglob("*") if p.suffix in (".c", ".cpp", ".h", ".hpp")]
    assert not foreign, f"C/C++ sources inside the package: {foreign}"


def _binding_lines():
    for path in sorted(BINDINGS.glob("*")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            yield f"{path.name}:{i}", line


def test_the_binding_includes_only_public_headers():
    # The binding calls the C API: include/ (the stable headers and the
    # unstable one) and its own helpers, never src/core's headers.
    allowed = {p.name for p in (ROOT / "include").glob("*.h")} | {
        p.name for p in BINDINGS.glob("*.h")
    }
    bad = [
        f"{where}: {m.group(1)}"
        for where, line in _binding_lines()
        if (m := re.match(r'\s*#\s*include\s*"([^"]+)"', line)) and m.group(1) not in allowed
    ]
    assert not bad, f"the binding includes non-public headers: {bad}"
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert re.search(
        r"target_include_directories\(shmstream_core PUBLIC include PRIVATE src/core\)", cmake
    )


def test_the_binding_reads_no_shared_word_itself():
    # Header and ring words are read by core accessors with the core's
    # memory orders (include/shmstream_unstable.h); a handle is opaque.
    pattern = re.compile(r"->(pub|lock|notify|stream)\.|hdr\(\)|seg\.id\b|->ctl\b|\bctl->|\.pos\.")
    bad = [f"{where}: {line.strip()}" for where, line in _binding_lines() if pattern.search(line)]
    assert not bad, "the binding reads shared words itself: " + "; ".join(bad)


def test_the_binding_checks_no_limit_of_the_core():
    # One owner per limit: the core refuses (segment.c, publish.c), the
    # Python API checks first with the constants the binding exports. A
    # comparison with SS_MAX_* in the binding is a second copy. (Bounds of
    # bytes read from shared memory, such as a message's DLPack dims in
    # _channel_handle.h, are input checks, not limits of create.)
    limit = re.compile(
        r"[<>]=?\s*SS_MAX_(SLOTS|HISTORY|DTYPE_BYTES|COUNT)\b|size\(\) > SS_MAX_NDIM"
    )
    bad = [f"{where}: {line.strip()}" for where, line in _binding_lines() if limit.search(line)]
    assert not bad, "the binding repeats a limit of the core: " + "; ".join(bad)


def _import_graph() -> dict[str, set[str]]:
    mods = _python_modules()
    extensions = _extension_modules()
    edges: dict[str, set[str]] = {}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.startswith("shmstream"))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = parts[: len(parts) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not target.startswith("shmstream"):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in extensions:
                        continue  # compiled modules import nothing of ours
                    targets.add(sub if sub in mods else target)
        edges[mod] = {t for t in targets if t in mods and t != mod}
    return edges


def test_the_import_graph_is_built_from_every_module():
    edges = _import_graph()
    assert "shmstream.streams.shared_memory" in edges and "shmstream.gpu.handle" in edges
    assert "shmstream.streams.shared_memory" in edges["shmstream.gpu.handle"]


def test_no_module_of_the_package_imports_itself_back_through_others():
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_stream_layer_never_imports_the_gpu_layer():
    edges = _import_graph()
    streams = [m for m in edges if m.startswith("shmstream.streams.")]
    assert "shmstream.streams._reading" in streams and "shmstream.streams._waiting" in streams
    for mod in streams:
        assert not any(t.startswith("shmstream.gpu") for t in edges[mod]), mod


#: Every folder of the package but the shared helpers and the registry is a
#: kind (streams, channels, arrays, loader, recording, gpu, bridge, cli,
#: viewer, milk ...): a new folder is held by the rules below at once.
KIND_FOLDERS = tuple(
    sorted(
        p.name
        for p in PKG.iterdir()
        if (p / "__init__.py").is_file() and p.name not in {"common", "registry"}
    )
)


def test_the_registry_imports_no_kind_and_the_shared_helpers_import_no_kind():
    # each kind's folder owns its registry entry (common/_kinds.py's table)
    edges = _import_graph()
    mods = [m for m in edges if m.startswith(("shmstream.registry", "shmstream.common."))]
    assert "shmstream.registry._purge" in mods and "shmstream.common._kinds" in mods
    for mod in mods:
        kinds = sorted(t for t in edges[mod] if t.split(".")[1] in KIND_FOLDERS)
        assert not kinds, f"{mod} imports {kinds}"


def _uses_of_the_shared_checks() -> dict[str, set[str]]:
    """name in common/_checks.py -> the folders (or "common._checks" itself)
    whose modules use it, as ``_checks.NAME`` or ``from ..._checks import NAME``."""
    shared = "shmstream.common._checks"
    uses: dict[str, set[str]] = {}
    for mod, path in _python_modules().items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        where = "common._checks" if mod == shared else [*mod.split("."), ""][1]
        tree = ast.parse(path.read_text())
        bound = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _resolve(package, node.level, node.module)
                for a in node.names:
                    if f"{target}.{a.name}" == shared:
                        bound.add(a.asname or a.name)
                    elif target == shared:
                        uses.setdefault(a.name, set()).add(where)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in bound:
                    uses.setdefault(node.attr, set()).add(where)
            elif mod == shared and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                uses.setdefault(node.id, set()).add(where)
    return uses


def test_a_shared_check_serves_two_kinds_and_a_kinds_checks_stay_in_its_folder():
    # Each kind owns its checks and their wording (streams/_checks.py,
    # channels/_checks.py ...); common/_checks.py holds what two kinds at
    # least use, and the helpers those are built of.
    uses = _uses_of_the_shared_checks()
    tree = ast.parse((PKG / "common" / "_checks.py").read_text())
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    defined += [
        t.id
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    ]
    assert "check_name" in defined and "check_ndim" in defined
    lonely = []
    for name in defined:
        users = uses.get(name, set())
        kinds = users - {"common._checks"}
        if len(kinds) < 2 and "common._checks" not in users:
            lonely.append(f"{name} ({', '.join(sorted(kinds)) or 'no kind'})")
    assert not lonely, "checks of one kind in common/_checks.py: " + "; ".join(lonely)
    # a kind's own checks are imported by its folder (and the GPU streams,
    # which are streams, by gpu/)
    built_on = {"gpu": {"streams"}}
    edges = _import_graph()
    kind_checks = [m for m in _python_modules() if m.endswith("._checks") and "common" not in m]
    assert "shmstream.streams._checks" in kind_checks
    for checks in kind_checks:
        owner = checks.split(".")[1]
        for mod, targets in edges.items():
            folder = mod.split(".")[1] if "." in mod else ""
            if checks in targets:
                assert folder == owner or owner in built_on.get(folder, ()), (
                    f"{mod} uses {checks}, the checks of another kind"
                )


def test_no_module_of_the_package_shares_its_name_with_a_name_of_the_package():
    # Issue 33: shmstream.stream and shmstream.channel were both functions
    # and modules (importing the module replaced the function). A name the
    # package's __init__.py binds to anything but that module must not be
    # the name of one of its modules or folders.
    modules = {p.stem for p in PKG.glob("*.py")} | {
        p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()
    }
    assert {"streams", "channels", "errors"} <= modules
    clashes = []
    for node in ast.walk(ast.parse((PKG / "__init__.py").read_text())):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                bound = a.asname or a.name
                is_that_module = node.level == 1 and not node.module and a.name == bound
                if bound in modules and not is_that_module:
                    clashes.append(f"{bound} (from {'.' * node.level}{node.module or ''})")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in modules:
            clashes.append(node.name)
        elif isinstance(node, ast.Assign):
            clashes += [t.id for t in node.targets if isinstance(t, ast.Name) and t.id in modules]
    assert not clashes, "names of the package that are also its modules: " + ", ".join(clashes)


def test_every_kind_the_registry_names_has_an_entry_in_the_table():
    import shmstream  # noqa: F401  (imports every folder: each registers its entry)
    from shmstream import registry
    from shmstream.common import _kinds

    assert sorted(_kinds.names()) == sorted(registry.KINDS)


def test_the_top_of_the_package_holds_only_its_front_and_thin_public_paths():
    # Never released, so no shims for old module paths: the front, and
    # shmstream.torch, a re-export of a kind's module (as msgspec's json module).
    front = {"__init__.py", "__main__.py", "errors.py"}
    reexports = {"torch.py": "from .loader.torch import "}
    assert {p.name for p in PKG.glob("*.py")} == front | set(reexports)
    for name, source in reexports.items():
        text = (PKG / name).read_text()
        code = [line for line in text.split('"""')[-1].splitlines() if line.strip()]
        assert code[0].startswith(source) and len(code) == 2, code  # the import and __all__


# ---- private names stay private -------------------------------------------------------
#
# The rule (one obvious place for each thing): a leading-underscore name may
# be used only inside the module that defines it. A private *module* (``_checks.py``,
# the ``_native`` extension, ``bridge/_wire.py``) is the package's own: its
# public names may be used from anywhere in the package. What one module
# takes from another is public there: documented, no leading underscore.
# Dunders (``__version__``, ``__all__``) are not private. The benchmarks
# (benchmarks/, beside the package) have their own rule: public API only.


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(package: str, level: int, module: str | None) -> str:
    if not level:
        return module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _private_reach_ins() -> list[str]:
    mods = _python_modules()
    modules = set(mods) | _extension_modules()
    found = []
    for mod, path in sorted(mods.items()):
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        bound: dict[str, str] = {}  # local name -> the shmstream module it names
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("shmstream"):
                        local = a.asname or a.name.partition(".")[0]
                        bound[local] = a.name if a.asname else "shmstream"
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(package, node.level, node.module)
                if not target.startswith("shmstream"):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in modules:
                        bound[a.asname or a.name] = sub  # a module: its public names are open
                    elif _is_private(a.name) and target != mod:
                        found.append(f"{mod}:{node.lineno} imports {a.name} from {target}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _is_private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
            ):
                owner = bound[node.value.id]
                if f"{owner}.{node.attr}" not in modules and owner != mod:
                    found.append(f"{mod}:{node.lineno} uses {owner}.{node.attr}")
    return found


def test_the_private_name_rule_sees_a_reach_in(tmp_path, monkeypatch):
    (tmp_path / "shmstream").mkdir()
    (tmp_path / "shmstream" / "a.py").write_text("def _helper():\n    pass\n")
    (tmp_path / "shmstream" / "b.py").write_text(
        "from .a import _helper\nfrom . import a\na._helper()\n"
    )
    monkeypatch.setattr(__import__(__name__), "PKG", tmp_path / "shmstream")
    found = _private_reach_ins()
    assert len(found) == 2, found


def test_no_module_uses_another_modules_private_names():
    found = _private_reach_ins()
    assert not found, "private names used outside their module: " + "; ".join(found)


def _private_uses(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each name of shmstream's that starts with "_" which
    ``path`` imports or reaches by attribute (``shmstream.bridge._session``,
    ``from shmstream import _direct``, ``from shmstream.x import _helper``)."""

    def private(dotted: str) -> bool:
        parts = dotted.split(".")
        return parts[0] == "shmstream" and any(
            p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts
        )

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            chain = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                names = [".".join([value.id, *reversed(chain)])]
        found += [(node.lineno, n) for n in names if private(n)]
    return found


def test_benchmarks_use_only_the_public_api():
    # The benchmarks sit beside the library and measure what a user gets: a
    # private name they need is a public hook the library is missing.
    paths = sorted(BENCH.rglob("*.py"))
    assert paths, "benchmarks/ has no Python files"
    uses = [
        f"{p.relative_to(ROOT)}:{line}: {name}" for p in paths for line, name in _private_uses(p)
    ]
    assert not uses, "benchmarks reach into private names: " + "; ".join(uses)


def test_the_private_name_check_finds_each_way_in(tmp_path):
    f = tmp_path / "b.py"
    f.write_text(
        "import shmstream._direct\nfrom shmstream.bridge._session import make_config\n"
        "from shmstream.loader import _pool\nimport shmstream\nshmstream._native.x\n"
        "from shmstream import stream, __version__\nfrom . import _common\n"
    )
    assert {name for _, name in _private_uses(f)} == {
        "shmstream._direct",
        "shmstream.bridge._session",
        "shmstream.bridge._session.make_config",
        "shmstream.loader._pool",
        "shmstream._native",
        "shmstream._native.x",
    }


# ---- C ------------------------------------------------------------------------------


def _c_source(path: Path) -> str:
    text = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


def _call_graph() -> dict[str, set[str]]:
    sources = {p.name: _c_source(p) for p in sorted(CORE.glob("*.c"))}
    defined = {}
    for name, text in sources.items():
        for m in re.finditer(r"^[A-Za-z_][\w \*]*?\b(ss_\w+)\s*\([^;{]*\)\s*\{", text, flags=re.M):
            defined[m.group(1)] = name
    edges: dict[str, set[str]] = {name: set() for name in sources}
    for name, text in sources.items():
        for m in re.finditer(r"\b(ss_\w+)\s*\(", text):
            where = defined.get(m.group(1))
            if where and where != name:
                edges[name].add(where)
    return edges


def test_the_call_graph_is_built_from_every_core_file():
    edges = _call_graph()
    assert "lease_lock.c" in edges["stream_lock.c"] and "publish.c" in edges["snapshot.c"]


def test_no_circle_of_calls_among_the_core_files():
    cycles = _cycles(_call_graph())
    assert not cycles, "call circles: " + "; ".join(" -> ".join(c) for c in cycles)


# ---- size ---------------------------------------------------------------------------


def test_no_source_file_is_over_800_lines():
    long = []
    # benchmarks/ too: benchmark code is code (its recorded results are not)
    for pattern in (
        "src/**/*.py",
        "src/**/*.c",
        "src/**/*.cpp",
        "src/**/*.h",
        "include/*.h",
        "benchmarks/**/*.py",
        "benchmarks/**/*.c",
    ):
        for path in ROOT.glob(pattern):
            n = len(path.read_text().splitlines())
            if n > MAX_LINES:
                long.append(f"{path.relative_to(ROOT)} ({n})")
    assert not long, f"files over {MAX_LINES} lines: {long}"


#: Lines above which a module of the package's Python surface has several
#: jobs (issue 33): split it by job.
MAX_PY_LINES = 500


def test_no_module_of_the_package_is_over_500_lines():
    paths = list(PKG.rglob("*.py"))
    assert len(paths) > 30
    sizes = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in paths}
    long = sorted(f"{p} ({n})" for p, n in sizes.items() if n > MAX_PY_LINES)
    assert not long, f"modules over {MAX_PY_LINES} lines (split them by job): {long}"


#: The package's modules that import torch (CONTRIBUTING.md, "Layout"): the
#: DataLoader's three, at their top, and the GPU device layer, inside the
#: function that first needs it. ``import shmstream`` and CPU streams import
#: none of them (tests/common/test_api.py checks torch stays out).
TORCH_AT_THE_TOP = {"loader/torch.py", "loader/_worker.py", "loader/_batch.py"}
TORCH_LAZILY = {"gpu/device.py", "loader/_torch_compat.py"}


def _torch_imports(tree: ast.Module) -> tuple[bool, bool]:
    """(imports torch at module level, imports it inside a function)."""
    lazy_nodes = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)
    }
    top = lazy = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        if any(n == "torch" or n.startswith("torch.") for n in names):
            if id(node) in lazy_nodes:
                lazy = True
            else:
                top = True
    return top, lazy


def test_only_the_loader_and_the_gpu_device_import_torch():
    top, lazy = set(), set()
    for path in sorted(PKG.rglob("*.py")):
        at_top, inside = _torch_imports(ast.parse(path.read_text()))
        rel = path.relative_to(PKG).as_posix()
        if at_top:
            top.add(rel)
        if inside:
            lazy.add(rel)
    assert top == TORCH_AT_THE_TOP
    assert lazy == TORCH_LAZILY


def test_the_torch_import_check_tells_top_from_lazy():
    assert _torch_imports(ast.parse("import torch.utils.data\n")) == (True, False)
    assert _torch_imports(ast.parse("def f():\n    from torch import cuda\n")) == (False, True)
    assert _torch_imports(ast.parse("import sys\nsys.modules.get('torch')\n")) == (False, False)


# ---- no pointer math in the Python surface -------------------------------------

#: Where a module reads a raw address, and why that is not pointer math
#: (docs/ARCHITECTURE.md, "Rules"); any other module reading one fails.
ADDRESS_READERS = {
    # the one exception to the rule, stated there: a view's bytes are
    # checked to lie inside its mapping, and its offset taken, to pickle it
    # (NumPy's own addresses, compared and subtracted, never dereferenced)
    "arrays/shared_array.py": "bounds and offset of a view in its mapping",
    # torch's device address handed to the binding unchanged
    "gpu/_values.py": "passes data_ptr() through",
    # the CUDA array interface protocol, which CuPy and Numba read
    "gpu/device.py": "exposes __cuda_array_interface__",
    # storage addresses as dictionary keys; positions are storage offsets
    "loader/_worker.py": "identity keys",
}
_ADDRESS = re.compile(
    r"data_ptr\(\)|__array_interface__|__cuda_array_interface__|\.ctypes\.data|import ctypes"
)


def test_the_python_surface_reads_addresses_only_where_the_table_says():
    readers = {
        path.relative_to(PKG).as_posix()
        for path in sorted(PKG.rglob("*.py"))
        if _ADDRESS.search(path.read_text())
    }
    assert readers == set(ADDRESS_READERS)
    assert _ADDRESS.search("p = a.ctypes.data + 8") and not _ADDRESS.search("a.ctypes_data")
