#!/usr/bin/env python3
"""Checks the crate layering written in docs/architecture.md against the workspace.

The table under "## Crates and their layering" names, for every crate, the Surge crates it may
depend on. This script fails (exit 1) when:
  * a crate of the workspace is missing from the table, or the table names one that is gone;
  * a crate depends (normal or build dependency) on a Surge crate the table does not allow;
    dev-dependencies are free: tests may start an in-process server or client;
  * surge-proto does I/O outside its `io` feature: its modules that are not gated behind
    the feature must not use the file system, processes, sockets or tokio;
  * surge-meta, the namespace store, reaches the network or an async runtime: none of its
    normal dependencies, direct or through others (dev-dependencies are free), may be tokio,
    socket2 or another networking crate, it must take surge-proto without the `io` feature,
    and its code (tests aside) must not use sockets.
Run from anywhere: `scripts/check-layering.py` (CI runs it through `make lint`).
"""
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
HEADING = "## Crates and their layering"


def allowed_edges():
    """{crate: set of Surge crates it may depend on}, from the document's table."""
    text = DOC.read_text()
    if HEADING not in text:
        sys.exit(f"{DOC}: no '{HEADING}' section")
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rules = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`surge"):
            continue
        crate = cells[0].strip("`")
        rules[crate] = set(re.findall(r"`(surge[a-z-]*)`", cells[2]))
    return rules


def workspace():
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["packages"]


def check_proto_io(problems):
    src = ROOT / "crates" / "surge-proto" / "src"
    lib = (src / "lib.rs").read_text()
    gated = set(re.findall(r'#\[cfg\(feature = "io"\)\]\s*pub mod (\w+);', lib))
    io_use = re.compile(r"std::fs|std::process|std::net::Tcp|std::net::Udp|\btokio\b")
    for path in sorted(src.glob("*.rs")):
        if path.stem in gated:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//", 1)[0]
            if io_use.search(code):
                problems.append(f"surge-proto does I/O outside the io feature: {path.relative_to(ROOT)}:{number}: {line.strip()}")


# Crates that open network connections or run futures on an event loop.
NETWORKING = re.compile(r"^(tokio(-[a-z-]+)?|socket2|mio|async-std|async-io|async-net|smol|hyper|h2|reqwest|ureq|curl|"
                        r"tonic|quinn|rustls|native-tls|openssl)$")


def check_meta_offline(packages, problems):
    meta = next((p for p in packages if p["name"] == "surge-meta"), None)
    if meta is None:
        return
    for dep in meta["dependencies"]:
        if dep["kind"] not in (None, "build"):
            continue
        if NETWORKING.match(dep["name"]):
            problems.append(f"surge-meta depends on {dep['name']}: the namespace store does no networking")
        if dep["name"] == "surge-proto" and "io" in dep["features"]:
            problems.append("surge-meta takes surge-proto with its io feature (tokio, frame I/O): it needs the types only")
    # Through other crates, as cargo builds surge-meta alone (features unified within it only).
    tree = subprocess.run(["cargo", "tree", "-p", "surge-meta", "-e", "normal,build", "--prefix", "none", "--format", "{p}"],
                          cwd=ROOT, check=True, capture_output=True, text=True).stdout
    reached = {line.split()[0] for line in tree.splitlines() if line.strip()}
    for name in sorted(n for n in reached if NETWORKING.match(n)):
        problems.append(f"surge-meta reaches {name} through its dependencies (cargo tree -p surge-meta -i {name})")
    socket_use = re.compile(r"std::net\b|std::os::unix::net|\btokio\b|\bsocket2\b")
    src = ROOT / "crates" / "surge-meta" / "src"
    for path in sorted(src.rglob("*.rs")):
        code = path.read_text().split("#[cfg(test)]\nmod tests", 1)[0]
        for number, line in enumerate(code.splitlines(), 1):
            if socket_use.search(line.split("//", 1)[0]):
                problems.append(f"surge-meta uses sockets or tokio: {path.relative_to(ROOT)}:{number}: {line.strip()}")


def main():
    rules = allowed_edges()
    packages = workspace()
    names = {p["name"] for p in packages}
    problems = []
    for name in sorted(names - rules.keys()):
        problems.append(f"{name} is not in the layering table of {DOC.relative_to(ROOT)}")
    for name in sorted(rules.keys() - names):
        problems.append(f"the layering table names {name}, which is not a workspace crate")
    for package in packages:
        name = package["name"]
        for dep in package["dependencies"]:
            if dep["name"] in names and dep["kind"] in (None, "build") and dep["name"] not in rules.get(name, set()):
                problems.append(f"{name} depends on {dep['name']}, which the layering does not allow "
                                f"(allowed: {', '.join(sorted(rules.get(name, set()))) or 'no Surge crate'})")
    check_proto_io(problems)
    check_meta_offline(packages, problems)
    for problem in problems:
        print(f"layering: {problem}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"layering: {len(packages)} crates, every dependency edge allowed")


if __name__ == "__main__":
    main()
