"""Shared helpers of the simulator benchmarks: locating the binary, running it, tables."""

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "sim"
OUT = REPO / "bench" / "out" / "sim"


def sim_binary() -> str:
    path = Path(os.environ.get("SURGE_SIM_BIN", REPO / "target" / "release" / "surge-sim"))
    if not path.is_file():
        raise SystemExit(f"{path} not built: run `cargo build --release -p surge-sim`")
    return str(path)


def run(system, workload, placement, out_dir) -> dict:
    """Runs one simulation (niced: the machine is shared) and returns its summary.json."""
    cmd = ["nice", "-n", "10", sim_binary(), "run", str(system), str(workload), "--placement", placement, "--out", str(out_dir)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads((Path(out_dir) / "summary.json").read_text())


def markdown_table(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
