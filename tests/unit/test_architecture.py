"""The architecture, checked: layers of the import graph, who may import what, start-up cost.

The rules (docs/architecture.md, "The rules the tests enforce"):
- the library never imports the CLI, and only ``slurmkit/cli/`` imports click;
- ``slurm/`` talks to Slurm and knows nothing of SSH, scripts, federation or the CLI;
  ``remote/`` knows nothing of scripts, jobs or federation; ``site/`` is the bottom
  (nothing of ``slurm/``: the time grammar both read is ``times.py``, below them);
- the parts (subpackages and top-level modules) import each other without cycles;
- each heavy or optional third-party module has one home (paramiko: remote/connect.py);
- a private name (``_name``) is used only in the module that defines it;
- a repeated submission pays for none of them, nor do status, logs, why and --help, which load
  no renderer either (measured in a fresh process).
"""

import ast
import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "slurmkit"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _package_of(name, path):
    """The package relative imports in module ``name`` (file ``path``) start from."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imported_module(node, package):
    """The absolute name of the module an ``ast.ImportFrom`` imports from, its relative levels resolved."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name, path):
    """Every module ``name`` imports, at module level or inside functions."""
    package = _package_of(name, path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _imported_module(node, package)
            found.add(module)
            # "from slurmkit.remote import runner" imports slurmkit.remote.runner
            found.update("%s.%s" % (module, alias.name) for alias in node.names)
    return found


GRAPH = {name: _imports(name, path) for name, path in _modules()}


def _part(module):
    """slurmkit.remote.connect -> 'remote'; slurmkit.jobs -> 'jobs'; other packages -> None."""
    parts = module.split(".")
    if parts[0] != "slurmkit" or len(parts) == 1:
        return None
    return parts[1]


def _importers_of(prefix):
    return sorted(name for name, imported in GRAPH.items()
                  if any(m == prefix or m.startswith(prefix + ".") for m in imported))


def _top_level_names(path):
    """The names a module defines at its top level (also inside top-level if/try blocks)."""
    names = set()

    def visit(statements):
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)
    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)).body)
    return names


def test_every_import_of_slurmkit_names_a_module_or_name_that_exists():
    """An import left behind by a move fails here, also in a module no unit test imports (pyslurm's backend)."""
    paths = dict(_modules())
    tests = [p for p in sorted((ROOT / "tests").rglob("*.py")) if (ROOT / "tests" / "unit" / "data") not in p.parents]
    sources = list(paths.items()) + [(None, p) for p in tests] + [
        (None, p) for p in sorted((ROOT / "bench").glob("*.py"))]
    missing = []
    for name, path in sources:
        package = _package_of(name, path) if name else ""
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                modules = [(a.name, None) for a in node.names if a.name.split(".")[0] == "slurmkit"]
            elif isinstance(node, ast.ImportFrom):
                module = _imported_module(node, package)
                if module.split(".")[0] != "slurmkit":
                    continue
                modules = [(module, [a.name for a in node.names])]
            else:
                continue
            for module, names in modules:
                if module not in paths:
                    missing.append("%s:%d imports %s" % (path.relative_to(ROOT), node.lineno, module))
                    continue
                defined = _top_level_names(paths[module])
                for item in names or ():
                    if item != "*" and "%s.%s" % (module, item) not in paths and item not in defined \
                            and "__getattr__" not in defined:
                        missing.append("%s:%d imports %s from %s" % (path.relative_to(ROOT), node.lineno, item,
                                                                      module))
    assert not missing


def test_the_graph_sees_the_package():
    assert "slurmkit.remote.connect" in GRAPH and "slurmkit.slurm.backend" in GRAPH
    assert "paramiko" in GRAPH["slurmkit.remote.connect"]       # lazy imports are seen too
    assert "slurmkit.slurm.backend" in GRAPH["slurmkit.session"]


def test_only_the_cli_imports_click_and_nothing_imports_the_cli():
    assert all(name.startswith("slurmkit.cli") for name in _importers_of("click"))
    # __main__ is the ``python -m slurmkit`` entry point: it is the CLI's door, not the library.
    assert all(name.startswith("slurmkit.cli") or name == "slurmkit.__main__"
               for name in _importers_of("slurmkit.cli"))


def test_the_fast_path_and_the_bodies_it_shares_never_import_click():
    """The fast path and the command bodies it shares with the click commands run without click (the
    reason the fast path exists); the entry point imports click only for what the fast path leaves
    (test_a_lookup_imports_no_heavy_module runs it)."""
    for name in ("slurmkit.cli.fast", "slurmkit.cli.views"):
        assert not {m for m in GRAPH[name] if m == "click" or m.startswith("click.")}, name
        assert not {m for m in GRAPH[name] if m.endswith("_commands") or m == "slurmkit.cli.options"}, name


def test_nothing_imports_the_python_api_but_itself_its_submitit_face_and_the_packages_top_level_names():
    # The API is a face of the library, like the CLI: the library never depends on either.
    # slurmkit.compat is the API under submitit's module names, nothing else.
    assert all(name.startswith(("slurmkit.api", "slurmkit.compat")) or name == "slurmkit"
               for name in _importers_of("slurmkit.api"))
    assert all(name.startswith("slurmkit.compat") for name in _importers_of("slurmkit.compat"))


def test_no_command_or_library_path_reaches_the_simulated_clusters():
    # slurmkit.federation.replay's SimulatedCluster stands in for Slurm in make bench-green and its tests;
    # a real submission must never be planned against it, so only bench/ and tests/ may import it.
    assert _importers_of("slurmkit.federation.replay") == []


@pytest.mark.parametrize("part,forbidden", [
    ("slurm", ("remote", "script", "federation", "cli", "jobs", "session", "requeue", "health", "sweep")),
    ("remote", ("script", "federation", "cli", "jobs", "session", "requeue", "health", "sweep")),
    ("site", ("slurm", "remote", "script", "federation", "cli", "jobs", "session", "requeue", "health", "sweep")),
    ("times", ("site", "slurm", "remote", "script", "federation", "cli", "jobs", "session", "requeue", "health",
               "sweep")),
    ("script", ("remote", "federation", "cli", "jobs", "session", "requeue", "health", "sweep", "observe")),
    ("jobs", ("federation", "cli", "requeue", "health", "sweep", "observe")),
    ("federation", ("cli", "requeue", "health", "sweep", "observe")),
    # sweep sits on jobs, federation, script, slurm and requeue (its state directory, spec helpers)
    ("requeue", ("cli", "sweep")),
    ("health", ("cli", "sweep")),
    ("envnames", ("site", "slurm", "remote", "script", "federation", "cli", "jobs", "session", "requeue", "health",
                  "sweep")),
    ("clusterfiles", ("remote", "script", "federation", "cli", "jobs", "session", "requeue", "health", "sweep")),
    ("session", ("sweep",)),
    ("results", ("sweep",)),
    ("testing", ("sweep",)),
    ("sweep", ("cli", "health")),
    # What container runtimes need is pure knowledge below the site configs, whose schema checks its
    # grammar (like times and envnames); the renderer and the planner read the site and call it.
    ("containers", ("site", "slurm", "remote", "script", "federation", "cli", "jobs", "session", "requeue",
                    "health", "sweep", "observe", "energy")),
    # The rooms of the next floor (their packages' docstrings say what goes there).
    ("energy", ("remote", "script", "federation", "cli", "jobs", "session", "requeue", "health", "sweep",
                "observe", "containers")),
    ("observe", ("cli", "sweep")),
    ("api", ("cli",)),
    ("compat", ("cli",)),
    # site init / site check --live: reads clusters through sessions and backends, below the faces only.
    ("discovery", ("cli", "api", "compat", "sweep", "requeue", "observe", "health")),
    # What sysfs says of a node's fabric and NCCL's naming rules: read by health on the nodes and by
    # discovery's probe job, so below both (like times and envnames).
    ("sysfs", ("site", "slurm", "remote", "script", "federation", "cli", "jobs", "session", "requeue", "health",
               "sweep", "observe", "energy", "containers", "api", "compat", "discovery")),
    # Runs on the nodes, where slurmkit need not be (cloudpickle carries it by value): nothing of slurmkit.
    ("helpers", ("site", "slurm", "remote", "script", "federation", "cli", "jobs", "session", "requeue", "health",
                 "sweep", "observe", "energy", "containers", "api", "compat", "errors", "times", "envnames")),
])
def test_no_import_runs_up_the_layers(part, forbidden):
    offenders = []
    for name, imported in GRAPH.items():
        if _part(name) != part:
            continue
        for module in imported:
            for bad in forbidden:
                if module == "slurmkit." + bad or module.startswith("slurmkit.%s." % bad):
                    offenders.append("%s imports %s" % (name, module))
    assert not offenders


def test_the_parts_import_each_other_without_cycles():
    edges = {}
    for name, imported in GRAPH.items():
        src = _part(name)
        if src is None:
            continue
        for module in imported:
            dst = _part(module)
            # "from slurmkit import __version__" names the package itself, not a part.
            if dst and dst != src and ((PACKAGE / dst).is_dir() or (PACKAGE / (dst + ".py")).exists()):
                edges.setdefault(src, set()).add(dst)
    state, cycle = {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycle.append(path + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycle, "import cycle between parts: %s" % " -> ".join(cycle[0])


@pytest.mark.parametrize("module,homes", [
    ("paramiko", {"slurmkit.remote.connect"}),
    ("jinja2", {"slurmkit.script.templates"}),
    ("yaml", {"slurmkit.site.loader"}),
    ("pyslurm", {"slurmkit.slurm.pyslurm_backend"}),
    ("ClusterShell", {"slurmkit.slurm.hostlist"}),
])
def test_each_heavy_module_has_one_home(module, homes):
    assert set(_importers_of(module)) <= homes


@pytest.mark.parametrize("module", ["psutil", "pynvml"])
def test_node_readings_live_in_health_sources(module):
    assert _importers_of(module)
    assert all(name.startswith("slurmkit.health.sources.") for name in _importers_of(module))


# The public API of a NamedTuple, spelled with an underscore so as not to clash with field names.
NAMEDTUPLE_API = {"_fields", "_field_defaults", "_replace", "_asdict", "_make"}


def _private_uses(name, path):
    """``from slurmkit.x import _y`` and ``x._y`` where ``x`` names a slurmkit module, in module ``name``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = _package_of(name, path)
    modules, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("slurmkit."):
                    modules[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _imported_module(node, package)
            if not base.startswith("slurmkit"):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append("line %d: from %s import %s" % (node.lineno, base, alias.name))
                modules[alias.asname or alias.name] = "%s.%s" % (base, alias.name)
    def private(attr):
        return attr.startswith("_") and not attr.startswith("__") and attr not in NAMEDTUPLE_API

    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and private(node.attr) and modules[node.value.id] != name):
            found.append("line %d: %s.%s" % (node.lineno, node.value.id, node.attr))
        # setattr(x, "_y", ...) and monkeypatch.setattr(x, "_y", ...): the same reach, spelled as a string
        elif (isinstance(node, ast.Call) and len(node.args) >= 2
                and (getattr(node.func, "id", None) == "setattr" or getattr(node.func, "attr", None) == "setattr")
                and isinstance(node.args[0], ast.Name) and node.args[0].id in modules
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and private(node.args[1].value) and modules[node.args[0].id] != name):
            found.append("line %d: %s.%s" % (node.lineno, node.args[0].id, node.args[1].value))
    return sorted(found, key=lambda use: int(use.split()[1].rstrip(":")))   # ast.walk goes breadth first


def test_no_module_uses_another_modules_private_names():
    """A leading underscore says "only here": a second module that reaches for it couples to what
    its owner may change at any time.  Make the name public where it is shared."""
    offenders = {name: uses for name, path in _modules() for uses in [_private_uses(name, path)] if uses}
    assert offenders == {}
    # the check itself sees what it looks for
    sample = ROOT / "tests" / "unit" / "data" / "private_use_sample.py"
    assert _private_uses("slurmkit.sample", sample) == ["line 2: from slurmkit.slurm.backend import _hidden",
                                                        "line 5: parsers._number",
                                                        "line 6: parsers._number"]


def test_no_test_uses_a_modules_private_names():
    """Tests hold the library to its public names too: a test that patches or calls a private
    helper breaks when the helper is renamed, and hides that the helper is a real seam (then it
    deserves a public name and a docstring)."""
    tests = sorted(p for p in (ROOT / "tests").rglob("*.py") if "data" not in p.relative_to(ROOT / "tests").parts)
    offenders = {str(p.relative_to(ROOT)): uses for p in tests for uses in [_private_uses("tests." + p.stem, p)] if uses}
    assert offenders == {}


def test_setup_cfg_lists_every_package():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in PACKAGE.rglob("__init__.py")}
    assert listed == on_disk | {"slurmkit.templates"}


HEAVY = ("jinja2", "yaml", "paramiko", "pyslurm", "psutil", "pynvml", "ClusterShell", "click.testing")


def test_a_repeated_render_imports_no_heavy_module(tmp_path):
    """The second identical render (what a resubmission does) comes from the caches."""
    site = ROOT / "site_configs" / "example-infiniband.yaml"
    code = ("import sys, json, io, contextlib\n"
            "from slurmkit.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    code = main(['render', '--site', %r, '-N', '2', '--token', 'tok', '--', 'python', 'train.py'])\n"
            "print(json.dumps([code, sorted(m for m in %r if m in sys.modules)]))\n" % (str(site), HEAVY))
    env = dict(os.environ, SLURMKIT_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                      check=True, cwd=str(ROOT)).stdout) for _ in range(2)]
    assert runs[0][0] == 0 and "jinja2" in runs[0][1] and "yaml" in runs[0][1]   # the first one really renders
    assert runs[1] == [0, []]


# What the commands typed all day (status, logs, why and every --help) must not load: the heavy
# libraries, and the renderer with its templates (only render, submit and sweep make a script).
NOT_FOR_LOOKUPS = HEAVY + ("slurmkit.script.render", "slurmkit.script.templates", "slurmkit.script.cache")


def _loaded_after(argv, env, modules=NOT_FOR_LOOKUPS):
    """[exit code, which of ``modules`` were loaded] of ``slurmkit argv`` in a fresh interpreter."""
    code = ("import sys, json, io, contextlib\n"
            "from slurmkit.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    code = main(%r)\n"
            "print(json.dumps([code, sorted(m for m in %r if m in sys.modules)]))\n" % (list(argv), modules))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=str(ROOT)).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["status", "--help"], ["logs", "--help"], ["why", "--help"],
                                  ["submit", "--help"]])
def test_help_imports_no_heavy_module(argv, tmp_path):
    """Help is read while typing: it loads click and the command modules, nothing else worth a millisecond."""
    env = dict(os.environ, SLURMKIT_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    assert _loaded_after(argv, env) == [0, []]


@pytest.mark.parametrize("argv", [["--help"], ["status", "--help"], ["logs", "-h"], ["why", "--help"],
                                  ["eff", "--help"]])
def test_a_kept_help_imports_no_click(argv, tmp_path):
    """The fast path's help: click renders it the first time; then it is read back, without click, the
    command modules or typing (re cannot be asked here: the probe's own json imports it)."""
    env = dict(os.environ, SLURMKIT_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    assert _loaded_after(argv, env, ("click",)) == [0, ["click"]]
    assert _loaded_after(argv, env, ("click", "slurmkit.cli.commands", "typing")) == [0, []]


@pytest.mark.parametrize("argv", [["status", "hopper:1"], ["logs", "-n", "20", "hopper:1"],
                                  ["why", "--here", "hopper:1"], ["eff", "hopper:1"]])
def test_a_lookup_imports_no_heavy_module(argv, tmp_path):
    """status, logs, why and eff, once the site file's parse is cached, load neither YAML nor Jinja2 nor the
    renderer nor pyslurm, nor click (the entry point's fast path serves them: slurmkit/cli/fast.py).
    The cluster's slurm.conf is missing, so each stops with one error line where it would first run a
    Slurm command: everything it imports to get there is loaded by then."""
    site = tmp_path / "site.yaml"
    site.write_text((ROOT / "site_configs" / "example-infiniband.yaml").read_text().replace(
        "slurm_conf: /etc/slurm/slurm.conf", "slurm_conf: %s" % (tmp_path / "missing" / "slurm.conf")))
    env = dict(os.environ, SLURMKIT_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1",
               SLURMKIT_VIA="local", SLURMKIT_SITE=str(site))
    env.pop("SLURMKIT_BACKEND", None)
    first = _loaded_after(argv, env)
    assert first[0] == 1 and "yaml" in first[1]          # it got as far as Slurm; the first run parsed the site
    assert _loaded_after(argv, env, NOT_FOR_LOOKUPS + ("click", "slurmkit.cli.commands")) == [1, []]


def test_test_files_have_unique_names():
    """pytest imports test modules by basename (tests/ has no packages): a second file of the
    same name in another folder stops the whole collection of `pytest tests`."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []
