"""Client-sensitivity check, shared by the studies that drive storage from emulated clients.

A benchmark point that the storage limits does not move when the client loses CPU; one that the
client limits does. The check re-runs a headline point with the client's processes confined to half
of the CPUs they may use and compares AU and samples/s (or any figure) with the point's own repeats:
a figure that fell by more than the repeats' spread (max − min) makes the point client-bound (one that
only rose: client-sensitive; no move within a spread wider than WIDE_SPREAD of the mean: inconclusive;
else not client-sensitive). MLPerf Storage has no such check (its client CPU still moves its metrics, mlcommons/storage#334).

Confinement is the engine's (run.confine_cpus, core/cpu_confine.py): a v1 cpuset child cgroup, else
cpuset.cpus or cpu.max on the run's own v2 cgroup, else every client thread's affinity (the reason kept);
a cgroup it makes is removed when the run ends.

Rows (every study that runs the check): a confined re-run's row says `client_check = "half CPUs"`, an
unconfined re-run made beside it (so a point measured once has a spread: kv_cache) `"all CPUs"`; both are
left out of every scored figure (`unchecked`). `verdicts` compares, per point, the confined rows with the
point's own rows (its repeats and any "all CPUs" re-run), the figures a study picks (`values`).

Per-core CPU: `CoreBusy` samples /proc/stat's per-CPU lines at the clock's start and stop, so a row
can say how busy the busiest core was (a machine 60 % busy on average can have one core at 100 %).
"""
from __future__ import annotations

import os

from ..core import cgroups
from ..core.columns import Column
from ..report.words import plural
# the engine's confinement, in the check's words (its rows' cpu_confinement, the tests)
from ..core.cpu_confine import AFFINITY, CPUSET, Confinement, confine  # noqa: F401


def half_cpus(cpus: list[int] | None = None) -> list[int]:
    """The first half (at least one) of the CPUs this process may run on."""
    cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    return cpus[: max(1, len(cpus) // 2)]


def apply_affinity(cpus: list[int]) -> None:
    """Pin every thread of this process (and what it starts later) to `cpus`."""
    if not cpus:
        return
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass                      # a thread that just ended


# --------------------------------------------------------------------------- per-core CPU
def read_cores() -> dict[str, tuple[int, int]]:
    """cpuN -> (busy jiffies, total jiffies) from /proc/stat (idle and iowait are not busy)."""
    out = {}
    with open("/proc/stat") as fh:
        for line in fh:
            f = line.split()
            if f and f[0].startswith("cpu") and f[0] != "cpu":
                v = [int(x) for x in f[1:9]]
                out[f[0]] = (sum(v) - v[3] - v[4], sum(v))
    return out


class CoreBusy:
    """A sampler (start()/stop()) of every core's busy % over the measured interval."""

    def __init__(self):
        self.a: dict[str, tuple[int, int]] = {}
        self.b: dict[str, tuple[int, int]] = {}

    def start(self) -> None:
        self.a = read_cores()

    def stop(self) -> None:
        self.b = read_cores()

    def percents(self) -> list[float]:
        out = []
        for cpu, (busy0, tot0) in self.a.items():
            busy1, tot1 = self.b.get(cpu, (busy0, tot0))
            if tot1 > tot0:
                out.append(100.0 * (busy1 - busy0) / (tot1 - tot0))
        return out

    def summary(self) -> dict:
        p = self.percents()
        return {"cpu_busy_percent_max_core": max(p), "cpu_busy_percent_min_core": min(p)} if p else {}


# --------------------------------------------------------------------------- verdict
def spread(values) -> float:
    v = [float(x) for x in values]
    return max(v) - min(v) if v else float("nan")


def sensitivity(base: dict[str, list[float]], confined: dict[str, list[float]]) -> dict:
    """Per figure (e.g. au_percent, samples_per_s): the means, the move and the spread of the repeats
    (max − min of the unconfined repeats, or of the confined ones when wider); `client_bound` when any
    figure moved by more than its spread."""
    out, bound = {}, False
    for k, vals in base.items():
        got = confined.get(k) or []
        if not vals or not got:
            continue
        b, c = sum(vals) / len(vals), sum(got) / len(got)
        s = max(spread(vals), spread(got))
        moved = abs(c - b) > s
        bound = bound or moved
        out[k] = {"base_mean": b, "confined_mean": c, "moved": c - b, "repeat_spread": s, "moved_beyond_spread": moved}
    return {"figures": out, "client_bound": bound}


# Repeats spread wider than this share of their mean: a move of that size would not show, so no move within
# the spread says nothing (quick-scale checkpoints on a loaded 2-core machine spread 40-130 %).
WIDE_SPREAD = 0.25


def verdict_word(result: dict, short: bool = False) -> str:
    """client-bound when a figure (every figure is higher-is-better: AU, samples/s, GiB/s) fell beyond its spread
    on half the CPUs; a figure that only rose beyond it still depends on the client's CPUs, but not for want of
    them; no move beyond the spread is inconclusive when a spread is wider than WIDE_SPREAD of its mean, else
    not client-sensitive."""
    if not result["client_bound"]:
        figs = result["figures"]
        wide = {k: v["repeat_spread"] / abs(v["base_mean"]) for k, v in figs.items()
                if v["base_mean"] and v["repeat_spread"] > WIDE_SPREAD * abs(v["base_mean"])}
        if wide:
            k = max(wide, key=wide.get)
            return f"inconclusive (the repeats of {k} spread {100 * wide[k]:.0f} % of their mean)"
        return "not client-sensitive"
    if any(v["moved_beyond_spread"] and v["moved"] < 0 for v in result["figures"].values()):
        return "client-bound"
    return "client-sensitive (faster on half the CPUs" + (")" if short else
                                                          ": contention among the client's processes, or noise)")


def verdict_text(result: dict, cpus: int, of: int, point: str) -> str:
    """One sentence: what moved and by how much against the spread."""
    parts = [f"{k} {v['base_mean']:.3g} → {v['confined_mean']:.3g} (moved {v['moved']:+.3g}, repeat spread "
             f"{v['repeat_spread']:.3g})" for k, v in result["figures"].items()]
    head = verdict_word(result)
    return f"{point} with the client on {cpus} of {of} CPUs: {head}: " + "; ".join(parts)


# --------------------------------------------------------------------------- rows (every study)
CHECK = "half CPUs"          # client_check of a confined re-run
REFERENCE = "all CPUs"       # client_check of an unconfined re-run beside it (a spread for a point measured once)

COLUMNS: tuple[Column, ...] = (
    Column("client_check", "", "a client-check re-run, not part of any scored figure: 'half CPUs' (the client "
                               "processes confined to half the CPUs) or 'all CPUs' (the same point unconfined, "
                               "beside it); empty: a run of the sweep", "text"),
    Column("cpus_confined", "", "client check: CPUs the client processes were held to"),
    Column("cpus_available", "", "client check: CPUs this process may run on (the confined run gets half)"),
    Column("cpu_confinement", "", "client check: how (cgroup cpuset, cpu.max, or affinity and why)", "text"),
)


def unchecked(frame):
    """The scored rows: the client check's re-runs (they answer another question) left out."""
    if "client_check" not in frame:
        return frame
    return frame[frame.client_check.isna() | (frame.client_check.astype(str) == "")]


def checks(frame, kind: str = CHECK):
    """The client check's re-runs of one kind (the confined ones by default)."""
    if "client_check" not in frame:
        return frame.iloc[0:0]
    return frame[frame.client_check.astype(str) == kind]


def check_cpus(note, launcher: str = "fork") -> list[int]:
    """The CPUs a confined re-run gets (half of this process's), or [] when the check cannot run here (said once
    through `note`: one CPU, or ranks under mpirun, which a cgroup on this host does not hold)."""
    if launcher != "fork":
        note(f"client check skipped: launcher {launcher} starts the client processes through mpirun, possibly on "
             "other hosts; the check confines processes on this host (launcher: fork)")
        return []
    if len(os.sched_getaffinity(0)) < 2:
        note("client check skipped: this process may run on 1 CPU, there is no half to confine it to")
        return []
    return half_cpus()


def confine_run(run, group) -> Confinement:
    """A confined re-run's client processes held to half the CPUs (a cgroup, else their affinity; the reason
    said in the notes). `group` is the run's own cgroup (the target's throttle), or None: then the run gets a
    cgroup of its own for them to join (under cgroup v2 the half is set on it), removed with the run."""
    own = None
    if group is None:
        try:
            own = run.cgroup("clients")
        except cgroups.CgroupUnavailable:
            pass                          # confine() says why it fell back to affinity
    conf = run.confine_cpus(half_cpus(), group or own)        # the engine's: a cpuset cgroup ends with the run
    if own is not None:
        conf.procs_files = own.procs_files + conf.procs_files
    if conf.reason:
        run.sweep.note(f"client check: client processes confined by {conf.describe()}")
    return conf


def row_columns(kind: str | None, conf: Confinement | None = None) -> dict:
    """client_check / cpus_confined / cpus_available / cpu_confinement of a run (empty on the sweep's own)."""
    return {"client_check": kind or None, "cpus_confined": len(conf.cpus) if conf else None,
            "cpus_available": len(os.sched_getaffinity(0)) if kind else None,
            "cpu_confinement": conf.describe() if conf else None}


def verdicts(frame, keys: list[str], values, label) -> list[dict]:
    """Per point (`keys`) re-run confined: its confined rows against its own rows (repeats and "all CPUs"
    re-runs). values(rows) -> {figure: [values]}; label(key tuple) -> the point in words. Each entry: the
    keys, client_bound, cpus_confined / cpus_all, confinement, runs, figures and one sentence."""
    out = []
    if "client_check" not in frame:
        return out
    kind = frame.client_check.astype(str).where(frame.client_check.notna(), "")
    base, conf = frame[kind.isin(["", REFERENCE])], frame[kind == CHECK]
    for key, g in conf.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        b = base
        for k, v in zip(keys, key):
            b = b[b[k] == v]
        if b.empty:
            continue
        res = sensitivity(values(b), values(g))
        cpus = int(g.cpus_confined.iloc[0])
        of = int(g.cpus_available.max()) if "cpus_available" in g else 2 * cpus
        point = {k: getattr(v, "item", lambda v=v: v)() for k, v in zip(keys, key)}     # numpy scalars as plain
        out.append({**point, "client_bound": res["client_bound"], "verdict": verdict_word(res), "cpus_confined": cpus,
                    "cpus_all": of, "confinement": str(g.cpu_confinement.iloc[0]), "repeats": len(b),
                    "confined_runs": len(g), "figures": res["figures"],
                    "text": verdict_text(res, cpus, of, label(key))})
    return out


def short_note(check: dict, at: str = "") -> str:
    """What sits next to a headline: 'client check, rerun on 1 of 2 CPUs: client-bound (measured save GiB/s fell
    by 0.12, more than its repeats' spread of 0.05)' (a verdicts() entry): the figure that moved most against its
    spread."""
    figs = check["figures"]
    # one figure, the one that moved most against its spread (beyond it when any did): page 1's rows stay short
    # enough that every target's answer is on page 1; the section's paragraph gives every figure
    ratio = lambda k: abs(figs[k]["moved"]) / (figs[k]["repeat_spread"] or 1e-12)   # noqa: E731
    beyond = [k for k, v in figs.items() if v["moved_beyond_spread"]]
    shown = [max(beyond or figs, key=ratio)] if figs else []
    moved = [f"{k} {'fell' if figs[k]['moved'] < 0 else 'rose'} by {abs(figs[k]['moved']):.3g}, "
             f"{'more than' if figs[k]['moved_beyond_spread'] else 'within'} its repeats' spread of "
             f"{figs[k]['repeat_spread']:.3g}" for k in shown]
    head = verdict_word(check, short=True)
    return (f"client check{at}, rerun on {check['cpus_confined']} of {check['cpus_all']} CPUs: {head}"
            + (f" ({'; '.join(moved)})" if moved else ""))


def markdown(checked: list[dict], who: str, figures: str) -> str:
    """The brief's paragraph: what the check did and one line per checked point."""
    lines = [f"- {c['text']} ({plural(c['repeats'], 'unconfined run')}, {c['confined_runs']} confined by "
             f"{c['confinement']})" for c in checked]
    return (f"**Client check** (what MLPerf Storage lacks): the point each answer rests on, re-run with {who} held "
            f"to half the CPUs. A point whose {figures} moves by more than the spread (max − min) of its own "
            "repeats is client-bound when it fell: its figure measures this machine's CPU as much as the storage; "
            "one that only rose depends on the client's CPUs too (contention among its processes) or is noise; no "
            f"move beyond a spread wider than {100 * WIDE_SPREAD:.0f} % of its mean is inconclusive.\n"
            + "\n".join(lines))
