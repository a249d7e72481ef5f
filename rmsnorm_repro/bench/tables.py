"""What every speed table shares: the environment it states and how it is written (results/speed/<stem>.{json,md})."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from .. import allocator
from ..atomic import atomic_write_text
from ..host import cpu_name


def environment(args) -> dict:
    return {
        "torch": torch.__version__, "cpu": cpu_name(), "threads": torch.get_num_threads(),
        "allocator": allocator.in_effect(), "flush_denormal": args.flush_denormal, "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES"),
        "LD_PRELOAD": os.environ.get("LD_PRELOAD"), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m rmsnorm_repro.bench " + " ".join(sys.argv[1:]),
    }


def write_table(out: Path, stem: str, env: dict, rows: list[dict], table: str, notes: list[str]) -> None:
    if not rows:  # never replace a committed table with an empty one
        raise SystemExit(f"error: nothing was measured for {stem}; {out / stem}.md and .json are left as they were")
    out.mkdir(parents=True, exist_ok=True)
    env = {**env, "load_avg": env.get("load_avg", os.getloadavg()[0])}  # others' processes share this machine
    atomic_write_text(out / f"{stem}.json", json.dumps({"env": env, "notes": notes, "rows": rows}, indent=1) + "\n")
    header = [f"# {stem}", "", f"`{env['command']}`: {env['cpu']}, torch {env['torch']}, {env['threads']} thread(s), "
              f"allocator {env['allocator']}, flush denormal {env['flush_denormal']}, {env['date']}"
              + (f", load average {env['load_avg']:.1f} on {os.cpu_count()} cores when written" if "load_avg" in env else "")
              + ".", ""]
    atomic_write_text(out / f"{stem}.md", "\n".join(header + [f"- {n}" for n in notes] + ["", table, ""]))
    print(table, flush=True)
    print(f"wrote {out / stem}.json and .md", flush=True)
