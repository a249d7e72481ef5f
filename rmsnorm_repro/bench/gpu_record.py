"""What the GPU check keeps when it is cut off: its clock (from the process's start), a log file beside its
results, and a watchdog that writes what is done and ends the process when a stage overruns."""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

from ..redact import machine_folders, without_machine_folders

_IMPORTED = time.perf_counter()


def portable(text: str, out: Path | None = None) -> str:
    """text without this machine's paths (no file the suite writes names them): redact.machine_folders (the
    checkout, home, temporary folder) and, longer ones first, the output folder and the python's prefix
    become <out> and <python>."""
    prefixes = (sys.prefix, sys.base_prefix)
    extra = {form: "<python>" for prefix in prefixes for form in (prefix, str(Path(prefix).resolve()))}
    if out is not None:
        extra.update({str(out): "<out>", str(out.resolve()): "<out>"})
    folders = sorted({**dict(machine_folders()), **extra}.items(), key=lambda item: -len(item[0]))
    return without_machine_folders(text, folders)


def process_age_s() -> float:
    """Seconds since this process started (Linux: /proc; elsewhere since this module was imported): a
    deadline counted from here includes the imports."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime: clock ticks after boot
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _IMPORTED


class Log:
    """Lines to stdout and, flushed at once, to a log file (appended: a rerun's lines follow the first's)."""

    def __init__(self, path: Path):
        self.path, self.out = path, path.parent
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def __call__(self, message: str) -> None:
        line = portable(f"[{process_age_s():6.1f} s] {message}", self.out)
        with self._lock:
            print(line, flush=True)
            self._file.write(line + "\n")

    def exception(self, what: str) -> str:
        """Logs the exception being handled with its traceback; returns its one line for a table."""
        kind, err, _ = sys.exc_info()
        self(f"{what}: {traceback.format_exc().rstrip()}")
        return portable(f"{kind.__name__}: {err}", self.out).splitlines()[0][:300]

    def close(self) -> None:
        self._file.close()


class Watchdog:
    """Calls `on_overrun(what was running)` and ends the process with `exit_code` once `limit_s` of the
    process's age has passed, unless stopped first: a hung kernel or a slow stage cannot take the call's
    whole time. `running` names the work in progress for that message."""

    def __init__(self, limit_s: float, on_overrun: Callable[[str], None], exit_code: int = 3):
        self.limit_s, self.on_overrun, self.exit_code = limit_s, on_overrun, exit_code
        self.running = "starting"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gpu-check watchdog", daemon=True)

    def __enter__(self) -> "Watchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, max(self.limit_s - process_age_s(), 0.01))):
            if process_age_s() >= self.limit_s:
                try:
                    self.on_overrun(self.running)
                finally:
                    sys.stdout.flush()
                    os._exit(self.exit_code)  # the main thread may be inside a kernel: no clean way out
