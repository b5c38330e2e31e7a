"""The package's shape, checked on its syntax tree (docs/architecture.md says why): one
writer of every lifecycle, one writer of a node's binding, one way to hold background work,
each table written by its owning family only, the placement rule, states named by their
enums, no import cycles (lazy imports included), no module past 600 lines, no folder past
fifteen modules, and tests that mirror the worker and never import one another."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.cli import lifecycles
from gpulease.db import money_tables, ops_tables, tables

PACKAGE = Path(__file__).resolve().parents[1] / "gpulease"
WRITER = PACKAGE / "lifecycle" / "writer.py"
GUARDED = {"status", "stage", "status_reason"}  # written only by the lifecycle writer
assert money_tables and ops_tables  # their tables join the base's subclasses
TABLES = {cls.__name__ for cls in tables.Base.__subclasses__()}
MAX_LINES = 600


def sources() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def lifecycle_writes(source: str, persistence: bool = True) -> list[tuple[int, str]]:
    """Where `source` writes a status, stage or status reason: assignments to those
    attributes, setattr with their names, and (in modules that persist) keywords or dict
    keys of those names handed to a table, `values()`, `dict()`, or written as literals."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and t.attr in GUARDED and not (
                        isinstance(t.value, ast.Name) and t.value.id == "self"):
                    found.append((node.lineno, f"assigns .{t.attr}"))
        if isinstance(node, ast.Call):
            callee = _name(node.func)
            if callee == "setattr" and len(node.args) > 1 and isinstance(
                    node.args[1], ast.Constant) and node.args[1].value in GUARDED:
                found.append((node.lineno, f"setattr {node.args[1].value!r}"))
            if callee in TABLES or callee in ("values", "dict"):
                for kw in node.keywords:
                    if kw.arg in GUARDED:
                        found.append((node.lineno, f"{callee}({kw.arg}=…)"))
        if persistence and isinstance(node, ast.Dict):
            for key in node.keys:
                if isinstance(key, ast.Constant) and key.value in GUARDED:
                    found.append((node.lineno, f"dict key {key.value!r}"))
    return sorted(found)


def test_the_checker_finds_every_form_of_write() -> None:
    sample = (
        "node.status = 'x'\n"
        "inst.stage, other = 'y', 1\n"
        "setattr(node, 'status', 'z')\n"
        "update(Node).values(status='a')\n"
        "Lease(status='active')\n"
        "rows = [dict(id=1, stage='b')]\n"
        "conn.execute(insert(Instance), {'status': 'pending'})\n"
        "node.status_reason = None\n"
        "InstanceView(status=inst.status)\n"  # a view, not a table: fine
        "self.status = code\n"  # an object's own attribute (an HTTP error's status)
    )
    assert [line for line, _ in lifecycle_writes(sample)] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_only_the_lifecycle_writer_writes_a_status_or_a_stage() -> None:
    offenders = []
    for path in sources():
        if path == WRITER:
            continue
        folders = set(path.relative_to(PACKAGE).parts[:-1])
        persists = bool({"services", "worker", "db", "lifecycle"} & folders)
        for line, what in lifecycle_writes(path.read_text(), persistence=persists):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {what}")
    assert not offenders, ("status and stage change only through lifecycle/writer.py "
                           "(transition, bulk, initial):\n" + "\n".join(offenders))


BINDER = PACKAGE / "lifecycle" / "binding.py"
# Rows of other tables that name an instance (a repair kept for its tenant): the variables
# a module assigns `instance_id` on that are not nodes. A new one is named here on purpose.
NOT_NODES = {"self", "repair", "again"}
BINDING_COLUMNS = ("instance_id", "generation", "erase_due_since")


def binding_writes(source: str) -> list[tuple[int, str]]:
    """Where `source` writes a node's binding: `instance_id`, `generation` or
    `erase_due_since` (the mark only a certified erase clears) assigned (on anything but
    NOT_NODES), handed to `values()` or a Node(), and GPU allocations made, changed or
    released (GpuAllocation(), insert/update(GpuAllocation))."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and t.attr in BINDING_COLUMNS \
                        and not (isinstance(t.value, ast.Name) and t.value.id in NOT_NODES):
                    found.append((node.lineno, f"assigns .{t.attr}"))
        if isinstance(node, ast.Call):
            callee = _name(node.func)
            if callee in ("values", "Node"):
                for kw in node.keywords:
                    if kw.arg in BINDING_COLUMNS and (
                            callee == "Node" or kw.arg != "instance_id"
                            or "Node" in ast.unparse(node.func)):
                        found.append((node.lineno, f"{callee}({kw.arg}=…)"))
            if callee == "GpuAllocation" or (callee in ("insert", "update") and node.args
                                              and _name(node.args[0]) == "GpuAllocation"):
                found.append((node.lineno, f"{callee}(GpuAllocation)"))
    return sorted(found)


def test_the_binding_checker_finds_every_form_of_write() -> None:
    sample = (
        "node.instance_id = None\n"
        "spare.generation += 1\n"
        "update(Node).values(instance_id=iid)\n"
        "q.values(generation=Node.generation + 1)\n"
        "conn.execute(insert(GpuAllocation), rows)\n"
        "update(GpuAllocation).where(x).values(released_at=now)\n"
        "GpuAllocation(gpu_id=1)\n"
        "repair.instance_id = inst.id\n"  # a repair row, not a node: fine
        "update(Lease).values(instance_id=iid)\n"  # another table: fine
        "select(GpuAllocation.id)\n"  # a read: fine
        "node.erase_due_since = None\n"
        "update(Node).values(erase_due_since=None)\n"
    )
    assert [line for line, _ in binding_writes(sample)] == [1, 2, 3, 4, 5, 6, 7, 11, 12]


def test_only_the_binding_writer_binds_a_node_to_an_instance() -> None:
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
                 for path in sources() if path != BINDER
                 for line, what in binding_writes(path.read_text())]
    assert not offenders, ("a node's instance, generation and GPU allocations change only "
                           "through lifecycle/binding.py (bind_update, bind_read, "
                           "touch_read, hold_gpus, unbind, release_gpus, fence, erased):\n"
                           + "\n".join(offenders))


CLAIMS = PACKAGE / "db" / "claims.py"
LOCK_COLUMNS = {"lock_token", "lock_owner", "lock_expires_at", "step_in_progress"}


def lock_writes(source: str) -> list[tuple[int, str]]:
    """Where `source` writes a claim's columns: assigned, or handed to `values()`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and t.attr in LOCK_COLUMNS:
                        found.append((node.lineno, f"assigns .{t.attr}"))
        if isinstance(node, ast.Call) and _name(node.func) in ("values", "dict"):
            found += [(node.lineno, f"values({kw.arg}=…)") for kw in node.keywords
                      if kw.arg in LOCK_COLUMNS]
    return found


def test_background_work_is_held_one_way_only() -> None:
    """Rows are claimed through db/claims.py alone (a lock token with an expiry the
    heartbeat extends), never by a bare row lock held over I/O or a column of their own."""
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
                 for path in sources() if path != CLAIMS
                 for line, what in lock_writes(path.read_text())]
    assert not offenders, ("a claim's columns are written only by db/claims.py (claim, "
                           "extend, begin_step, release, take):\n" + "\n".join(offenders))


def test_every_claimed_table_is_one_pipelines_and_every_pipeline_is_run() -> None:
    from gpulease.db.base import Claimable
    from gpulease.worker.runner import PIPELINES

    claimed = {cls for cls in tables.Base.__subclasses__() if issubclass(cls, Claimable)}
    assert sorted(t.__name__ for t in claimed) == sorted(
        p.table.__name__ for p in PIPELINES)
    pipelines_dir = PACKAGE / "worker" / "pipelines"
    declared = {p.stem for p in pipelines_dir.glob("*.py")
                if "PIPELINE = Pipeline(" in p.read_text()}
    assert declared == {p.step.__module__.rpartition(".")[2] for p in PIPELINES}


def test_only_the_worker_reaches_into_the_worker() -> None:
    """Families never import the worker (it imports them: only the entry points, the
    lifecycle chapter's generator and the test kit do); a pipeline never imports a
    periodic job or the scheduler (jobs may finish a pipeline's work: a timeout fails a
    node as its pipeline would)."""
    graph = import_graph()
    outside = [f"{mod} imports {dep}" for mod, deps in graph.items()
               for dep in deps if dep.startswith("gpulease.worker")
               and not mod.startswith(("gpulease.worker", "gpulease.server",
                                       "gpulease.cli.lifecycles", "gpulease.testing"))]
    assert not outside, "\n".join(outside)
    crossing = [f"{mod} imports {dep}" for mod, deps in graph.items()
                if mod.startswith("gpulease.worker.pipelines") for dep in deps
                if dep.startswith(("gpulease.worker.jobs", "gpulease.worker.schedule",
                                   "gpulease.worker.runner"))]
    assert not crossing, "\n".join(crossing)


def test_the_lifecycle_writers_import_no_family() -> None:
    """lifecycle/ (the writer, the effects registry, the binding writer, the history) acts
    for every family, so any family can make a transition: it imports none of them, nor
    the worker; the families' effects reach it through the registry compose.py fills."""
    graph = import_graph()
    reaching = [f"{mod} imports {dep}" for mod, deps in graph.items()
                if mod.startswith("gpulease.lifecycle") for dep in deps
                if dep.startswith(("gpulease.services", "gpulease.worker", "gpulease.compose"))]
    assert not reaching, "\n".join(reaching)


def bare_state_comparisons(source: str) -> list[tuple[int, str]]:
    """Where `source` compares a `.status` or `.stage` with a string literal (or a tuple
    of them), or filters one `in_()` them, instead of naming the declared state."""
    found: list[tuple[int, str]] = []

    def literal(e: ast.expr) -> bool:
        if isinstance(e, ast.Constant):
            return isinstance(e.value, str)
        return isinstance(e, ast.Tuple | ast.List | ast.Set) and any(
            isinstance(x, ast.Constant) and isinstance(x.value, str) for x in e.elts)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(x, ast.Attribute) and x.attr in ("status", "stage")
                   for x in sides) and any(literal(x) for x in sides):
                found.append((node.lineno, ast.unparse(node)[:80]))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in ("in_", "not_in")) and isinstance(
                node.func.value, ast.Attribute) and node.func.value.attr in ("status", "stage") \
                and any(literal(a) for a in node.args):
            found.append((node.lineno, ast.unparse(node)[:80]))
    return found


def test_states_are_compared_through_their_enums() -> None:
    """A state named by its enum is found by every search and rename; drivers compare the
    states of the systems they speak to (a Docker container's), not ours."""
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
                 for path in sources() if path.parent.name != "drivers"
                 for line, what in bare_state_comparisons(path.read_text())]
    assert not offenders, ("compare states through domain/states.py's enums:\n"
                           + "\n".join(offenders))


MAX_PARAMETERS = 6  # values a function takes, self aside; more: a parameter object
DECLARATIONS = {"get", "post", "put", "patch", "delete", "head", "api_route", "websocket",
                "command", "callback"}  # a route's or a command's options are its interface
RECORD_BUILDERS = {("domain/fleet/acceptance.py", "_check")}  # builds a Check field by field


def wide_functions(source: str) -> list[tuple[int, str, int]]:
    """Functions of `source` that take more than MAX_PARAMETERS values and are not a
    declared route or command (their parameters are the query's or the command line's)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = node.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs
                 if x.arg not in ("self", "cls")]
        declared = any(isinstance(d, ast.Call) and _name(d.func) in DECLARATIONS
                       for d in node.decorator_list)
        if len(names) > MAX_PARAMETERS and not declared:
            found.append((node.lineno, node.name, len(names)))
    return found


def test_the_width_checker_counts_values_and_spares_declarations() -> None:
    source = ("def wide(a, b, c, d, e, f, *, g): ...\n"
              "class C:\n    def method(self, a, b, c, d, e, f): ...\n"
              "@router.get('/x')\ndef route(a, b, c, d, e, f, g, h): ...\n")
    assert wide_functions(source) == [(1, "wide", 7)]


def test_no_function_takes_more_than_six_values() -> None:
    offenders = [f"{path.relative_to(PACKAGE)}:{line}: {name} takes {count}"
                 for path in sources()
                 for line, name, count in wide_functions(path.read_text())
                 if (str(path.relative_to(PACKAGE)), name) not in RECORD_BUILDERS]
    assert not offenders, ("group the values that travel together in a parameter object "
                           "(a frozen dataclass named for what they are):\n"
                           + "\n".join(offenders))


NEEDS = {"Records": {"settings", "db", "clock", "wake"}}  # gpulease/ports/records.py
NEEDS["Priced"] = NEEDS["Records"] | {"catalog", "catalog_version", "price_book"}
NEEDS["Sealed"] = NEEDS["Records"] | {"box"}
NEEDS["Moves"] = NEEDS["Priced"] | {"effects"}
NEEDS["Driven"] = NEEDS["Moves"] | NEEDS["Sealed"] | {"drivers"}
NEEDS["Stored"] = NEEDS["Moves"] | NEEDS["Sealed"] | {"object_store"}
NEEDS["Keeping"] = NEEDS["Moves"] | NEEDS["Sealed"] | {"kept", "rates"}
# The services that take the composition's whole Platform, and why.
WHOLE_PLATFORM = {
    "catalog/versions.py": "publishing a catalog changes the process's own",
    "orders/ordering.py": "an order reads stock kept, drivers and storage together",
    "support/replacement.py": "a swap moves storage, drivers and the lifecycle together",
}


def platform_taken_needlessly(source: str) -> list[tuple[int, str, str]]:
    """Functions that take the whole Platform but only read what a narrower need offers,
    and never hand it on: (line, function, the narrower one that would do)."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name == "__init__":
            continue
        for arg in fn.args.args + fn.args.kwonlyargs:
            if not (isinstance(arg.annotation, ast.Name) and arg.annotation.id == "Platform"):
                continue
            names = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == arg.arg]
            read = {n.value: n.attr for n in ast.walk(fn)
                    if isinstance(n, ast.Attribute) and n.value in names}
            if len(read) < len(names):
                continue  # handed on, or used whole
            would_do = next((need for need, offers in NEEDS.items()
                             if set(read.values()) <= offers), None)
            if would_do:
                found.append((fn.lineno, fn.name, would_do))
    return found


def test_the_needs_checker_finds_a_platform_taken_for_its_records() -> None:
    source = ("def reads(p: Platform): return p.db, p.clock\n"
              "def prices(p: Platform): return p.catalog, p.db\n"
              "def hands_on(p: Platform): return other(p), p.db\n"
              "def drives(p: Platform): return p.drivers, p.box\n"
              "def whole(p: Platform): return p.drivers, p.object_store(), p.kept\n")
    assert platform_taken_needlessly(source) == [(1, "reads", "Records"),
                                                 (2, "prices", "Priced"),
                                                 (4, "drives", "Driven")]


def test_families_receive_what_they_use() -> None:
    """A family's function takes the Platform only where none of the needs in
    ports/records.py offers what it reads (mypy checks the calls it hands it to), and only
    the services named in WHOLE_PLATFORM take it at all."""
    offenders = [f"{path.relative_to(PACKAGE)}:{line}: {name} could take {need}"
                 for path in sorted(SERVICES.rglob("*.py"))
                 for line, name, need in platform_taken_needlessly(path.read_text())]
    assert not offenders, "\n".join(offenders)
    whole = {str(path.relative_to(SERVICES)) for path in sorted(SERVICES.rglob("*.py"))
             if "from gpulease.platform import" in path.read_text()}
    assert whole == set(WHOLE_PLATFORM), (
        "a service takes one of the needs of ports/records.py, not the Platform; "
        f"new: {sorted(whole - set(WHOLE_PLATFORM))}, gone: {sorted(set(WHOLE_PLATFORM) - whole)}")


SERVICES = PACKAGE / "services"
FAMILY_SIZE = 15  # modules a folder holds at most, __init__ aside


def families() -> dict[str, tuple[str, ...]]:
    """Each family under services/ and the tables it declares it owns (`TABLES`)."""
    owned: dict[str, tuple[str, ...]] = {}
    for init in sorted(SERVICES.glob("*/__init__.py")):
        for node in ast.parse(init.read_text()).body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) else None)
            if isinstance(target, ast.Name) and target.id == "TABLES":
                assert node.value is not None
                owned[init.parent.name] = tuple(ast.literal_eval(node.value))
    return owned


def table_writes(source: str) -> set[str]:
    """The table classes `source` inserts, updates or deletes rows of, or constructs."""
    names = {cls.__name__ for cls in tables.Base.__subclasses__()}
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        callee = _name(node.func)
        if callee in names:
            found.add(callee)
        elif callee in ("insert", "update", "delete") and node.args and (
                _name(node.args[0]) in names):
            found.add(str(_name(node.args[0])))
    return found


def test_every_table_has_one_owner_and_only_its_family_writes_it() -> None:
    """Where a new module goes follows from the table it writes; the lifecycle writer
    (status, stage, the event rows), the binding writer (a node's instance and GPU
    allocations) and the claims (the worker's lock columns) act for every family, and the
    worker's pipelines and jobs drive rows through them."""
    owned = families()
    owner = {table: family for family, held in owned.items() for table in held}
    assert sum(len(held) for held in owned.values()) == len(owner), "a table owned twice"
    by_class = {cls.__name__: cls.__tablename__ for cls in tables.Base.__subclasses__()}
    mechanisms = {"events", "gpu_allocations", "config_drives", "rate_counters"}
    unowned = set(by_class.values()) - set(owner) - mechanisms
    assert not unowned, f"tables no family declares in its TABLES: {sorted(unowned)}"
    trespass = []
    for path in sorted(SERVICES.rglob("*.py")):
        family = path.relative_to(SERVICES).parts[0]
        for cls in table_writes(path.read_text()):
            table = by_class[cls]
            if table == "events":
                continue  # the writer's event rows, made set-based by `Bulk.events()`
            if owner.get(table) != family:
                trespass.append(f"{path.relative_to(PACKAGE.parent)} writes {table}, which "
                                f"is {owner.get(table, 'no family')}'s")
    assert not trespass, "\n".join(trespass)


def test_no_folder_holds_more_than_about_fifteen_modules() -> None:
    crowded = {}
    for folder in sorted({p.parent for p in sources()}):
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > FAMILY_SIZE:
            crowded[str(folder.relative_to(PACKAGE.parent))] = len(modules)
    assert not crowded, f"split these by what their modules do: {crowded}"


def test_each_module_sits_where_the_placement_rule_puts_it() -> None:
    """docs/architecture.md, "Where a new module goes": no I/O → domain/ (and imports
    nothing of the database, the web or the drivers); a module of a pipeline lives in
    worker/pipelines/ and declares or serves one; a periodic job is a module under
    worker/jobs/<family>/ declaring its JOB; a family's module writes only its family's
    tables (test above); routers hold no queries."""
    graph = import_graph()
    impure = [f"{mod} imports {dep}" for mod, deps in graph.items()
              if mod.startswith("gpulease.domain") for dep in deps
              if not dep.startswith("gpulease.domain")]
    assert not impure, "domain/ decides without I/O:\n" + "\n".join(impure)
    jobs = PACKAGE / "worker" / "jobs"
    for path in jobs.glob("*/*.py"):
        if path.name != "__init__.py":
            assert "\nJOB = Job(" in path.read_text(), f"{path.name} declares no JOB"
    stray = [p.name for p in (PACKAGE / "worker").glob("*.py")
             if p.name not in ("__init__.py", "runner.py", "schedule.py")]
    assert not stray, f"a worker module is a pipeline's or a job's: {stray}"
    for path in (PACKAGE / "api" / "routers").glob("*.py"):
        text = path.read_text()
        assert ".db.read()" not in text and ".db.write()" not in text and (
            "select(" not in text), f"{path.name}: a router calls a service, never the database"


def test_every_worker_module_has_its_test_module() -> None:
    """tests/ mirrors the package; for the worker, module by module."""
    tests = PACKAGE.parent / "tests"
    missing = [str(path.relative_to(PACKAGE.parent)) for path in
               sorted((PACKAGE / "worker").rglob("*.py")) if path.name != "__init__.py"
               and not (tests / path.relative_to(PACKAGE).parent / f"test_{path.name}").exists()]
    assert not missing, f"give these their tests/…/test_<module>.py: {missing}"


def test_no_test_module_reaches_into_another() -> None:
    """Shared helpers live in gpulease/testing/ or in tests' helper modules and fixture
    plugins (tests/fixtures/), never in a test_*.py another test module imports."""
    offenders = []
    for path in sorted((PACKAGE.parent / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and (
                    node.module.startswith("tests.")) and (
                    node.module.rpartition(".")[2].startswith("test_")
                    or node.module.endswith("conftest")):
                offenders.append(f"{path.relative_to(PACKAGE.parent)} imports {node.module}")
    assert not offenders, "\n".join(offenders)


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Every module's imports of the package's modules, at any depth (a lazy import in a
    function counts: it is the same dependency, only later)."""
    modules = {_module(p): p for p in sources()}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                    + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names] + [base]
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and name != mod and name.startswith("gpulease") and name != "gpulease":
                    graph[mod].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_in_the_package() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("path", list(sources()), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_over_600_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.name} has {lines} lines; split it by what it does"


def test_the_architecture_doc_shows_the_declared_lifecycles() -> None:
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    assert lifecycles.update(doc) == doc, (
        "docs/architecture.md is behind the declarations: run "
        "`gpulease states --update docs/architecture.md`")
