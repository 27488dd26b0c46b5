#!/usr/bin/env python3
"""The movie encoder of the in-transit workflow (the seed paper's encoder.sh).

As in the paper, it does not wait for the whole run: whenever `--batch` new frames are
published it encodes them into an intermediate H.264 segment kept in node-local scratch
(`--scratch`, DRAM in the paper), and when the visualization's `vis.done` marker appears it
encodes the remaining frames and concatenates all segments (no re-encoding) into the final
movie, published atomically into the working directory. On the burst-buffer run the job then
stages the movie out to the PFS.

Usage:
    encode.py --frames WORKDIR/frames --done WORKDIR/vis.done --out WORKDIR/movie.mp4
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import conventions as cv


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


def encode_segment(frames: list[Path], segment: Path, fps: int) -> None:
    """Encodes `frames` (in order) into one MPEG-TS segment (TS concatenates cleanly)."""
    # ffmpeg's image reader wants consecutive numbers: link the batch under 000000.png, 000001.png...
    with tempfile.TemporaryDirectory(dir=segment.parent) as d:
        for i, frame in enumerate(frames):
            shutil.copyfile(frame, Path(d) / f"{i:06d}.png")
        ffmpeg("-framerate", str(fps), "-i", f"{d}/%06d.png",
               "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-f", "mpegts", str(segment))


def concatenate(segments: list[Path], out: Path) -> None:
    listing = segments[0].parent / "segments.txt"
    listing.write_text("".join(f"file '{s}'\n" for s in segments))
    with cv.publishing(out) as tmp:
        ffmpeg("-f", "concat", "-safe", "0", "-i", str(listing), "-c", "copy", "-f", "mp4", str(tmp))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", required=True, help="directory the visualization publishes frames into")
    ap.add_argument("--done", required=True, help="the visualization's done marker")
    ap.add_argument("--out", required=True, help="the movie to publish")
    ap.add_argument("--batch", type=int, default=20, help="frames per intermediate segment")
    ap.add_argument("--fps", type=int, default=10)
    ap.add_argument("--poll", type=float, default=0.2)
    ap.add_argument("--scratch", default=None, help="node-local directory for segments (default: /dev/shm)")
    args = ap.parse_args()
    cv.exit_on_sigterm()

    frames_dir, done, out = Path(args.frames), Path(args.done), Path(args.out)
    scratch_root = args.scratch or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    with tempfile.TemporaryDirectory(prefix="encode-", dir=scratch_root) as scratch:
        segments: list[Path] = []
        encoded: set[int] = set()
        while True:
            marker = cv.read_marker(done)  # before the scan, as in visualize.py
            new = sorted((s, p) for s, p in cv.numbered(frames_dir, cv.FRAME_RE).items() if s not in encoded)
            if len(new) >= args.batch or (marker is not None and new):
                batch = new[: args.batch] if marker is None else new
                segment = Path(scratch) / f"segment{len(segments):05d}.ts"
                encode_segment([p for _, p in batch], segment, args.fps)
                segments.append(segment)
                encoded.update(s for s, _ in batch)
            elif marker is not None:
                break
            else:
                time.sleep(args.poll)
        if len(encoded) != marker["frames"]:
            raise SystemExit(f"encode: encoded {len(encoded)} frames, the visualization announced {marker['frames']}")
        if not segments:
            raise SystemExit("encode: no frames to encode")
        concatenate(segments, out)


if __name__ == "__main__":
    main()
