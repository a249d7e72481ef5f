"""The paper's speed claims: RMSNorm (and pRMSNorm) take less time per training step than LayerNorm, by
the paper's margin (Tables 2, 4, 6, 8, 10), and Table 3's two codebases.

Two verdicts per task and norm, both from steps timed side by side in one process (speed.json; report/
paired.py): the direction (faster at all) and the size (a speed-up of at least SIZE_FRACTION of the
paper's). Beside them, the speed-up the suite's own measurements predict on the timing's machine, LayerNorm's
share of its step (bench --profile) x (1 - the norm's time / LayerNorm's, in that profiled step or from bench
--module), which says why a CPU step gains a few percent where the paper's GPU steps gained 7-41%; the
machine of the timing and of the runs; and where the runs' own clocks disagree, which measure is trusted.
"""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from ..paths import repo_dir
from .aggregate import Group, speedup, speedup_interval
from .paired import Measured, paired_speedup
from .rules import FAILS, HOLDS, UNSURE, Claim, fmt_stat
from .tables import read_paper

# the paper's table of each task's speed-ups (results/paper/<table>.csv, column speedup_pct)
PAPER_TABLE = {"rnnsearch": "table2", "transformer": "table4", "reader": "table6", "retrieval": "table8",
               "convpool": "table10"}
# the size claim holds when the speed-up's 95% interval lies at or above this fraction of the paper's
SIZE_FRACTION = 0.5
NAMES = {"rmsnorm": "RMSNorm", "prmsnorm": "pRMSNorm"}
MODULE_CALLS = {"layernorm": "suite LayerNorm module", "rmsnorm": "suite RMSNorm module",
                "prmsnorm": "suite pRMSNorm module"}


def speed_dir() -> Path | None:
    """results/speed of the checkout (bench's profiles and module timings), None in an installed wheel."""
    repo = repo_dir()
    return repo / "results" / "speed" if repo is not None else None


def paper_speedup(task: str, norm: str, column: str = "speedup_pct") -> tuple[float, str, str] | None:
    """(the paper's speed-up over LayerNorm as a fraction, "Table N", its hardware) of a task's norm."""
    table = PAPER_TABLE.get(task)
    row = next((r for r in read_paper(table) if r.get("norm") == norm), None) if table else None
    if row is None or not row.get(column):
        return None
    return float(row[column]) / 100, f"Table {table[5:]}", row.get("hardware", "")


def _profile_machine(md: Path) -> str:
    """The machine line bench --profile wrote under its title (`command`: <machine>, torch ...)."""
    found = re.search(r"`: (.+?), torch ", md.read_text(encoding="utf-8")) if md.exists() else None
    return found.group(1) if found else "machine not recorded"


def _module_ratio(norm: str, where: Path) -> tuple[float, str] | None:
    """The median over shapes of the norm module's CPU time / the LayerNorm module's (bench --module,
    module-cpu.json, the default allocator), with the machine it names."""
    path = where / "module-cpu.json"
    if not path.exists() or norm not in MODULE_CALLS:
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = [r for r in data.get("rows", []) if r.get("allocator") == "default"]
    by_shape: dict[str, dict[str, float]] = {}
    for r in rows:
        for key, call in MODULE_CALLS.items():
            if str(r.get("call", "")).startswith(call):
                by_shape.setdefault(r["shape"], {})[key] = r["cpu_ms"]
    ratios = [times[norm] / times["layernorm"] for times in by_shape.values() if norm in times and "layernorm" in times]
    if not ratios:
        return None
    return statistics.median(ratios), str(data.get("env", {}).get("cpu", "machine not recorded"))


def predicted_speedup(task: str, scale: str, norm: str, device: str = "cpu") -> tuple[float | None, str]:
    """(predicted speed-up or None, how it was found): LayerNorm's share of its training step (bench
    --profile of this task at this scale and device) x (1 - the norm module's time / LayerNorm's: bench
    --module's median over shapes, in thread CPU time, which other jobs on the machine do not inflate; where
    it did not time the norm, the norm ops' times in the profiled step)."""
    where = speed_dir()
    stem = f"profile-{task}-{scale}-{device}"
    command = f"`python -m rmsnorm_repro.bench --profile task={task} scale={scale}`"
    if where is None or not (where / f"{stem}.json").exists():
        return None, (f"no prediction: LayerNorm's share of the step is not measured at scale={scale} on {device} "
                      f"({command})")
    rows = {r["norm"]: r for r in json.loads((where / f"{stem}.json").read_text(encoding="utf-8"))}
    ln, own = rows.get("layernorm"), rows.get(norm)
    if ln is None or not ln.get("profiled_step_ms"):
        return None, f"no prediction: results/speed/{stem}.json has no LayerNorm row"
    share, machine = float(ln["share"]), _profile_machine(where / f"{stem}.md")
    module = _module_ratio(norm, where) if device == "cpu" else None
    if module is not None:
        ratio, source = module[0], f"bench --module's median over shapes, {module[1]}"
    elif own is not None and ln["norm_ms"] > 0 and own.get("norm_ms"):
        ratio, source = own["norm_ms"] / ln["norm_ms"], "its norm ops' time in that profiled step"
    else:
        return None, f"no prediction: {norm}'s time against LayerNorm's is not measured (bench --module)"
    value = share * (1 - ratio)
    return value, (f"predicted from the suite's measurements: LayerNorm's share of its step {share:.1%} (bench "
                   f"--profile, results/speed/{stem}, {machine}) x (1 - {NAMES.get(norm, norm)}'s time / LayerNorm's "
                   f"{ratio:.2f}, {source}) = {value:.1%}")


def timing_machine(m: Measured) -> str:
    """The CPU a speed.json's timing names in its description ("... thread(s), <cpu>, <date>, ...")."""
    found = re.search(r"thread\(s\), (.+?), \d{4}-\d{2}-\d{2}", m.how)
    return found.group(1) if found else "machine not recorded"


def runs_machines(groups: list[Group]) -> list[str]:
    """The devices the runs name in their env record (device_name)."""
    return sorted({str((run.summary.get("env") or {}).get("device_name")) for g in groups for run in g.runs
                   if (run.summary.get("env") or {}).get("device_name")})


def _runs_clock(group: Group, ln: Group) -> tuple[str, tuple[float, float] | None]:
    """The runs' own speed-up and its 95% bootstrap interval (aggregate.speedup_interval), as text."""
    gain, interval = speedup(group.time(), ln.time()), speedup_interval(group, ln)
    if gain is None:
        return "the runs' own clocks: no step times", None
    shown = (f"the runs' own s / 1k steps: LayerNorm {fmt_stat(ln.time(), 1)}, {group.label} "
             f"{fmt_stat(group.time(), 1)}, speed-up {gain:.1%}")
    if interval is None:
        return shown, None
    return shown + f" [{interval.lo:.1%}, {interval.hi:.1%}]", (interval.lo, interval.hi)


def speed_claims(groups: list[Group], measured: dict[str, Measured] | None = None,
                 tasks: tuple[str, ...] = tuple(PAPER_TABLE), scale: str = "mini", device: str = "cpu") -> list[Claim]:
    """Per task and norm (RMSNorm, and pRMSNorm where it ran) two claims, from the side-by-side timing only:
    "faster per step than LayerNorm" (the paired speed-up's 95% interval, paired.paired_speedup, above 0:
    holds; below: does not hold; across 0, or the old fixed-order design: cannot tell) and "faster by at
    least SIZE_FRACTION of the paper's speed-up" (the interval at or above that: holds; below it: does not
    hold; across it: cannot tell). The runs' own step times are shown, never judged: runs train at different
    times, beside other jobs; where they disagree with the timing (the 95% intervals do not overlap) or the
    timing ran on another machine than the runs, the line says so."""
    claims = []
    for task in tasks:
        norms: dict[str, Group] = {}
        for group in groups:
            if group.task == task:
                norms.setdefault(group.norm, group)
        ln = norms.get("layernorm")
        for name in ("rmsnorm", "prmsnorm"):
            group = norms.get(name)
            if ln is None or group is None:
                if name == "rmsnorm":
                    claims.append(Claim(f"{task}: rmsnorm is faster per step than LayerNorm", UNSURE,
                                        f"needs {task} runs of layernorm and rmsnorm"))
                continue
            claims += _pair_claims(task, name, group, ln, (measured or {}).get(task), scale, device)
    return claims


def _pair_claims(task: str, name: str, group: Group, ln: Group, m: Measured | None, scale: str,
                 device: str) -> list[Claim]:
    paper = paper_speedup(task, name)
    direction = f"{task}: {group.label} is faster per step than LayerNorm"
    size = (f"{task}: {group.label}'s speed-up is at least {SIZE_FRACTION:.0%} of the paper's "
            f"({paper[0]:.1%}, {paper[1]}, {paper[2]})" if paper else None)
    clock, clock_interval = _runs_clock(group, ln)
    _, predicted = predicted_speedup(task, scale, name, device)
    if m is None or name not in m.times_ms or "layernorm" not in m.times_ms:
        why = f"not measured side by side (`python -m rmsnorm_repro.bench --steps`); {clock} (shown, not judged)"
        return [Claim(direction, UNSURE, why)] + ([Claim(size, UNSURE, f"{why}; {predicted}")] if size else [])
    if m.steps_per_round is None:
        why = f"measured in a fixed order, unpaired (a version-1 speed.json): measure again to judge; {clock}"
        return [Claim(direction, UNSURE, why)] + ([Claim(size, UNSURE, why)] if size else [])
    sp = paired_speedup(m.times_ms[name], m.times_ms["layernorm"], m.steps_per_round)
    timed_on, trained_on = timing_machine(m), runs_machines([group, ln])
    measured = (f"side by side{m.how}: speed-up (T_LN - T_X) / T_LN = {sp.gain:.1%}, 95% interval [{sp.lo:.1%}, "
                f"{sp.hi:.1%}] from {sp.rounds} rounds of {sp.steps} paired steps; the smallest speed-up it decides "
                f"(80% of the time): {sp.resolution:.1%}")
    notes = []
    if trained_on and timed_on not in trained_on:
        notes.append(f"timed on {timed_on}, the runs trained on {' | '.join(trained_on)}: the verdicts speak for "
                     f"{timed_on} only (time again on the runs' machine to judge theirs)")
    if clock_interval is not None and (clock_interval[1] < sp.lo or clock_interval[0] > sp.hi):
        notes.append("the runs' own clocks disagree with the paired timing (their 95% intervals do not overlap); "
                     "trusted: the paired timing, which times the norms in one process, in balanced order, on the "
                     "same batches, where the runs trained at different times beside other jobs")
    tail = "; ".join([clock + (" (shown, not judged)" if not notes else ""), *notes])
    verdict = UNSURE if sp.lo <= 0 <= sp.hi else HOLDS if sp.lo > 0 else FAILS
    claims = [Claim(direction, verdict, measured + ("; within noise" if verdict == UNSURE else "") + f"; {tail}")]
    if size:
        target = SIZE_FRACTION * paper[0]
        sized = HOLDS if sp.lo >= target else FAILS if sp.hi < target else UNSURE
        claims.append(Claim(size, sized, f"measured {sp.gain:.1%} [{sp.lo:.1%}, {sp.hi:.1%}] vs {target:.1%} "
                                         f"({SIZE_FRACTION:g} x the paper's {paper[0]:.1%} on {paper[2]}); "
                                         f"{predicted}; "
                                         f"timed on {timed_on}, the runs trained on "
                                         f"{' | '.join(trained_on) or 'a machine not recorded'}"))
    return claims


def table3_claim(runs_by_codebase: dict[str, list[Group]]) -> Claim:
    """Table 3: RMSNorm's speed-up is larger in the Theano column (34.0%) than in the PyTorch one (11.0%).

    Never decided here: the paper's columns are two frameworks' implementations (Theano Nematus and a PyTorch
    port), while the suite's Table 3 runs both columns' norm settings in its own PyTorch code, so a difference
    between them would not be the paper's. The runs' own speed-ups per column are shown."""
    rows = {r.get("norm"): r for r in read_paper("table3")}
    paper = (f"the paper: {rows['rmsnorm']['th_speedup_pct']}% (Theano) vs {rows['rmsnorm']['py_speedup_pct']}% "
             "(PyTorch)") if rows.get("rmsnorm") else "the paper's Table 3 is not here"
    shown = []
    for codebase, groups in sorted(runs_by_codebase.items()):
        norms = {g.norm: g for g in groups}
        if "rmsnorm" in norms and "layernorm" in norms:
            shown.append(f"{codebase} settings: {_runs_clock(norms['rmsnorm'], norms['layernorm'])[0]}")
    return Claim("Table 3: RMSNorm's speed-up is larger in the Theano column than in the PyTorch one", UNSURE,
                 f"{paper}; not reproducible here: both columns run in the suite's PyTorch code (codebase= sets only "
                 "the norms' settings), so the frameworks' difference is not measured"
                 + ("; " + "; ".join(shown) + " (shown, not judged)" if shown else ""))
