"""The ctypes bindings of libsurge (surge._libsurge, surge.staging, surge.workflow) against the
C header, the truth of the C API: every call the Python side makes has its argument and result
types declared, as the header declares them. No instance needed."""

import ctypes
import errno
import os
import re
from pathlib import Path

import pytest

from surge import _libsurge

HERE = Path(__file__).resolve().parent
HEADER = HERE / ".." / ".." / "crates" / "surge-capi" / "include" / "surge.h"
PACKAGE = HERE / ".." / "surge"
BINDINGS = ("_libsurge.py", "staging.py", "workflow.py")

# C types of surge.h -> ctypes (enums are ints; char * buffers are passed as c_char_p).
SCALARS = {
    "int": ctypes.c_int, "double": ctypes.c_double, "size_t": ctypes.c_size_t,
    "uint64_t": ctypes.c_uint64, "char *": ctypes.c_char_p, "const char *": ctypes.c_char_p,
    "int *": ctypes.POINTER(ctypes.c_int), "uint64_t *": ctypes.POINTER(ctypes.c_uint64),
    "void": None,
}


def _header_text() -> str:
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", text)


def _normalise(c_type: str) -> str:
    c_type = re.sub(r"\s+", " ", c_type).strip()
    c_type = re.sub(r"\s*\*", " *", c_type).replace("* *", "**")
    return c_type


def header_functions() -> dict[str, tuple[str, list[str]]]:
    """name -> (return type, [parameter types]) of every surge_* function surge.h declares."""
    text = _header_text()
    functions = {}
    for match in re.finditer(r"([A-Za-z_][\w\s\*]*?[\s\*])(surge_\w+)\s*\(([^)]*)\)\s*;", text):
        result, name, params = match.groups()
        types = []
        for param in params.split(","):
            param = param.strip()
            if param in ("", "void"):
                continue
            # The type is all but the parameter's name.
            types.append(_normalise(re.sub(r"\w+$", "", param)))
        functions[name] = (_normalise(result), types)
    return functions


def header_types() -> tuple[set[str], dict[str, list[tuple[str, str]]]]:
    """Opaque struct names, and the fields (name, C type) of each struct typedef."""
    text = _header_text()
    opaque = set(re.findall(r"typedef\s+struct\s+\w+\s+(\w+)\s*;", text))
    structs = {}
    for body, name in re.findall(r"typedef\s+struct\s*\{(.*?)\}\s*(\w+)\s*;", text, re.DOTALL):
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if decl:
                c_type, names = re.match(r"(\w+)\s+(.*)", decl).groups()
                fields += [(n.strip(), c_type) for n in names.split(",")]
        structs[name] = fields
    return opaque, structs


def expected_ctype(c_type: str, opaque: set[str], structs: dict):
    if c_type in SCALARS:
        return SCALARS[c_type]
    if c_type.startswith("enum "):
        return ctypes.c_int
    base = c_type.rstrip(" *")
    stars = len(c_type) - len(c_type.rstrip("*"))
    if base in opaque:
        return ctypes.c_void_p if stars == 1 else ctypes.POINTER(ctypes.c_void_p)
    if base in structs and stars == 1:
        return "struct", base
    raise AssertionError(f"surge.h type {c_type!r} has no ctypes mapping in this test: add one")


def calls_made() -> set[str]:
    """Every surge_* function the Python modules call (by attribute: `_lib.surge_x(...)`)."""
    names = set()
    for module in BINDINGS:
        names |= set(re.findall(r"\.(surge_\w+)\b", (PACKAGE / module).read_text()))
    return names


FUNCTIONS = header_functions()
OPAQUE, STRUCTS = header_types()


def test_the_header_is_read():
    # A reader that finds nothing must not pass by checking nothing.
    assert len(FUNCTIONS) >= 20, sorted(FUNCTIONS)
    assert FUNCTIONS["surge_queue_claim"] == (
        "int", ["const char *", "const char *", "const char *", "double", "int", "char *", "size_t",
                "uint64_t *"])
    assert FUNCTIONS["surge_open_failed_stage"] == ("surge_failed_stages *", ["const char *"])
    assert FUNCTIONS["surge_last_error"] == ("const char *", [])
    assert "surge_watch" in OPAQUE and "surge_queue_counts" in STRUCTS


def test_every_call_made_is_declared_in_the_header_and_the_table():
    made = calls_made()
    assert len(made) >= 20, sorted(made)
    assert made <= set(FUNCTIONS), f"not in surge.h: {sorted(made - set(FUNCTIONS))}"
    assert made <= set(_libsurge.SIGNATURES), \
        f"called without argtypes/restype in _libsurge.SIGNATURES: {sorted(made - set(_libsurge.SIGNATURES))}"


def _same(declared, expected) -> bool:
    if isinstance(expected, tuple):          # a pointer to a struct of the header
        fields = [(name, {"uint64_t": ctypes.c_uint64, "double": ctypes.c_double}[c])
                  for name, c in STRUCTS[expected[1]]]
        target = getattr(declared, "_type_", None)
        return isinstance(target, type) and issubclass(target, ctypes.Structure) and \
            list(target._fields_) == fields
    return declared is expected


@pytest.mark.parametrize("name", sorted(_libsurge.SIGNATURES))
def test_the_table_matches_the_header(name):
    assert name in FUNCTIONS, f"{name} is not in surge.h"
    result, params = FUNCTIONS[name]
    restype, argtypes = _libsurge.SIGNATURES[name]
    assert _same(restype, expected_ctype(result, OPAQUE, STRUCTS)), (name, "restype", result, restype)
    assert len(argtypes) == len(params), (name, params, argtypes)
    for i, (c_type, declared) in enumerate(zip(params, argtypes)):
        assert _same(declared, expected_ctype(c_type, OPAQUE, STRUCTS)), (name, i, c_type, declared)


def test_the_loaded_library_has_the_types():
    try:
        from surge import staging, workflow  # noqa: F401 - loads libsurge, as users do
    except ImportError as error:
        pytest.fail(f"libsurge not built ({error}): `make build` first")
    lib = _libsurge.load()
    for name in sorted(calls_made()):
        function = getattr(lib, name)
        restype, argtypes = _libsurge.SIGNATURES[name]
        # argtypes is None for a function nobody declared; [] is a declared "no arguments".
        assert function.argtypes is not None and list(function.argtypes) == list(argtypes), name
        assert function.restype is restype, name


class FakeFailedStages:
    """surge_*_failed_stage as surge.h says: -ERANGE for a path that does not fit, which is
    kept for the next call; ``always_short`` refuses every buffer."""

    def __init__(self, paths, always_short=False):
        self.paths, self.always_short = [os.fsencode(p) for p in paths], always_short
        self.sizes, self.closed = [], False

    def surge_open_failed_stage(self, bb_dir):
        return 1234

    def surge_next_failed_stage(self, handle, buffer, size):
        assert handle == 1234 and size == len(buffer)
        self.sizes.append(size)
        assert len(self.sizes) < 100, "asked for the same path again and again with one buffer size"
        if not self.paths:
            return 0
        path = self.paths[0]
        if self.always_short or len(path) + 1 > size:
            return -errno.ERANGE
        ctypes.memmove(buffer, path + b"\0", len(path) + 1)
        self.paths.pop(0)
        return 1

    def surge_close_failed_stage(self, handle):
        self.closed = True


def test_failed_stages_grows_its_buffer_until_a_long_path_fits(monkeypatch):
    staging = pytest.importorskip("surge.staging", reason="libsurge not built")
    long = "/mnt/bb/" + "/".join(["d" * 250] * 40) + "/chk.h5"        # 10,000+ bytes
    paths = ["/mnt/bb/a.h5", long, "/mnt/bb/b.h5", long[:5000]]
    fake = FakeFailedStages(paths)
    monkeypatch.setattr(staging, "_lib", fake)
    assert staging.failed_stages("/mnt/bb") == paths          # nothing lost, nothing cut
    assert fake.closed and max(fake.sizes) == 16384 and fake.sizes[0] == 4096

    endless = FakeFailedStages(["/mnt/bb/x"], always_short=True)
    monkeypatch.setattr(staging, "_lib", endless)
    with pytest.raises(staging.StageError) as error:
        staging.failed_stages("/mnt/bb")
    assert error.value.errno == errno.ERANGE and endless.closed


def test_kappa_is_production_over_consumption():
    workflow = pytest.importorskip("surge.workflow", reason="libsurge not built")
    counts = dict(produced=6, claimed=0, done=6, backlog=0, expired=0)
    assert workflow.QueueStatus(**counts, production_per_s=3.0, consumption_per_s=1.5).kappa == 2.0
    assert workflow.QueueStatus(**counts, production_per_s=3.0, consumption_per_s=0.0).kappa is None
