"""What limited a run (storage, the client, neither), and accelerators supported with it.

The client is the machine that runs the emulated accelerators. Its own CPU is
measured: every accelerator process reports its user + system CPU seconds over the
run (resource.getrusage(RUSAGE_SELF): the process and all its loader threads) and
the CPUs it may run on (sched_getaffinity). The machine's CPU use over the run comes
from the monitor (`cpu_busy_percent`, all CPUs) and per core (`cpu_busy_percent_max_core`).
The storage's side: the device's utilisation (`device_util_percent_avg`), its mean
read latency against the idle device's (`device_read_latency_us_idle`, measured before
the sweep), and on a throttled target the run's own read rate against the throttle's cap.

Rule (`limited_by`, the evidence in words in `limited_by_reason`). A run's bound is the AU
nothing but the storage profile allows: 100 %, or on a throttled target the throttle's
bound (`throttle_au_bound_percent`).
  none       AU within MARGIN_POINTS of its bound of 100 %: nothing took a measurable share;
  storage    AU within MARGIN_POINTS of a throttle bound below 100 %: the target's profile;
AU further below its bound always carries a cause from the evidence, never "none":
  client     the client had no CPU headroom (the machine >= CPU_SATURATED_PERCENT busy, a core
             >= CORE_SATURATED_PERCENT, the accelerators using >= CPU_SATURATED_PERCENT of
             their CPUs, one accelerator process using >= kit/client_bound's BOUND_FRACTION of the one
             core its interpreter runs Python on, or on an S3 target the accelerators and the local gateway together using
             >= CPU_SATURATED_PERCENT of the machine's: the reason names the gateway), or the accelerators' own measured delays (sleep overshoot, barrier
             release: CPU scheduling, never storage) are most of the AU lost;
  storage    the device was busy (>= DEVICE_BUSY_PERCENT utilised, or its read latency
             >= LATENCY_LOADED_RATIO x the idle device's) or the run read at >= 90 % of the
             throttle's cap;
  when both sides show evidence, the side that explains more of the lost time wins
             (delays = client, data waits = storage) and the reason names both;
  unexplained  the accelerators waited for data while neither the device nor the CPU shows load.
A run under the page-cache cap whose device read >= memory.THRASH_RATIO × the loaders' bytes is `client`
whatever else it shows: the cap (a client setting) thrashed, and the device's load was its re-reads.
A run whose AU is no measurement (window.py: too few steps, or the loaders did not read what AU claims in its
window) and would pass is `unmeasured`: prefetch carried it, so it cannot pass. A failing one keeps its cause
(prefetch only raises AU). A run whose device read less than its loaders on a cache-cold target says the page
cache served the rest; AU above a throttle bound is said to be above it, never "at" it.
A client-limited run says nothing about the storage: "accelerators supported"
reports `client-limited at N` when the first failing accelerator count was
client-limited, instead of a number the storage did not earn.
"""
from __future__ import annotations

import math

import pandas as pd

from ...core import reruns
from ...core.interference import OTHER_CPU_CORES
from ...kit import client_check
from ...kit.client_bound import BOUND_FRACTION
from .memory import thrashed
from .window import cache_served, files_for_window, is_false, not_measured
from ...kit.client_check import CHECK, checks, unchecked  # noqa: F401  (the rows every reader filters)

CPU_SATURATED_PERCENT = 90.0    # busier than this = no CPU headroom
CORE_SATURATED_PERCENT = 95.0   # one core this busy queues whatever runs on it
MARGIN_POINTS = 3.0             # AU this close to its bound lost nothing measurable
DEVICE_BUSY_PERCENT = 80.0      # device utilisation (diskstats io_ticks) this high = storage busy
LATENCY_LOADED_RATIO = 3.0      # device read latency this many times the idle device's = queueing
THROTTLE_FULL_SHARE = 0.9       # reading at 90 % of the throttle's cap = the throttle binds


def client_cpu_columns(ranks: list[dict], total_time_s: float, steps: int, loader_bytes: int) -> dict:
    """The accelerators' own CPU over the run: seconds, per step (all accelerators), per GB read."""
    cpu = [r["cpu_s"] for r in ranks if r.get("cpu_s") is not None]
    if len(cpu) != len(ranks):
        return {}
    cores = set()              # (host, cpu): ranks on several hosts use several machines' CPUs
    for r in ranks:
        cores.update((r.get("host", ""), c) for c in (r.get("cpus") or ()))
    total = float(sum(cpu))
    n_cores = len(cores) or 1
    own = [c - r.get("helper_cpu_s", 0.0) for c, r in zip(cpu, ranks)]    # the Python process alone (objects.py)
    return {"client_cpu_s": total,
            "client_cpu_s_per_step": total / steps if steps else float("nan"),   # one synchronous step, all accelerators
            "client_cpu_s_per_gb": total / (loader_bytes / 1e9) if loader_bytes else float("nan"),
            "client_cores": n_cores,
            "client_cpu_percent_of_cores": 100.0 * total / (total_time_s * n_cores) if total_time_s > 0 else float("nan"),
            # per process (kit/client_bound): one interpreter runs Python on one core at a time
            "client_cpu_cores_busiest_accelerator": max(own) / total_time_s if total_time_s > 0 else float("nan"),
            "client_busiest_accelerator": int(max(range(len(own)), key=own.__getitem__))}


def _known(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _evidence(r: dict, bound: float) -> tuple[list[str], list[str], float]:
    """(client evidence, storage evidence, share of the lost time that was the emulator's own delay)."""
    g = r.get
    client, storage = [], []
    if _known(g("cpu_busy_percent")) and g("cpu_busy_percent") >= CPU_SATURATED_PERCENT:
        other = g("other_cpu_cores_avg")          # core/interference.py: CPU that was not the run's
        client.append(f"machine CPU busy {g('cpu_busy_percent'):.0f} % of the run"
                      + (f", {other:.2f} cores of it other work" if _known(other) and other > OTHER_CPU_CORES else ""))
    if _known(g("cpu_busy_percent_max_core")) and g("cpu_busy_percent_max_core") >= CORE_SATURATED_PERCENT:
        client.append(f"busiest core {g('cpu_busy_percent_max_core'):.0f} % busy")
    if _known(g("client_cpu_percent_of_cores")) and g("client_cpu_percent_of_cores") >= CPU_SATURATED_PERCENT:
        client.append(f"accelerators used {g('client_cpu_percent_of_cores'):.0f} % of their CPUs")
    one = g("client_cpu_cores_busiest_accelerator")
    if _known(one) and one >= BOUND_FRACTION:
        client.append(f"accelerator {g('client_busiest_accelerator')} used {one:.2f} of the one core a Python "
                      f"process runs on (≥ {BOUND_FRACTION:.0%}: kit/client_bound)")
    both = g("client_gateway_cpu_percent_of_machine")     # an S3 local gateway shares this machine's CPUs
    if _known(both) and both >= CPU_SATURATED_PERCENT:
        client.append(f"client + S3 gateway CPU {both:.0f} % of the machine's CPUs "
                      f"(gateway {g('gateway_cpu_s') or 0:.1f} s)")
    au, measured = float(g("au_percent")), g("measured_time_s")
    lost = measured * (1 - au / 100) if _known(measured) else float("nan")
    delay_share = (min(1.0, g("emulator_overhead_s") / lost)
                   if _known(lost) and lost > 0 and _known(g("emulator_overhead_s")) else 0.0)
    removed = g("au_percent_overhead_removed")
    if _known(removed) and removed >= bound - MARGIN_POINTS:
        client.append(f"accelerators late by themselves (sleep overshoot, barrier): AU {removed:.1f} % "
                      "without their own delays")
    # the device's own counters count every process's I/O: where others moved more of its bytes than the run
    # (core/interference.py), its busy time and latency are theirs, no evidence against this target (a CPU-starved
    # run on page-cached data read "device 81 % utilised" from the tests beside it and was called storage)
    others = g("other_device_bytes")
    own = max((v for v in (g("run_io_bytes"), g("cgroup_read_bytes")) if _known(v)), default=0)
    theirs = _known(others) and others > own
    if not theirs and _known(g("device_util_percent_avg")) and g("device_util_percent_avg") >= DEVICE_BUSY_PERCENT:
        storage.append(f"device {g('device_util_percent_avg'):.0f} % utilised")
    lat, idle = g("device_read_latency_us"), g("device_read_latency_us_idle")
    if not theirs and _known(lat) and _known(idle) and idle > 0 and lat >= LATENCY_LOADED_RATIO * idle:
        storage.append(f"device read latency {lat:,.0f} µs = {lat / idle:.1f} × the idle device's {idle:,.0f} µs")
    rate, cap = g("cgroup_read_mb_per_s_au_window"), g("throttle_cap_mb_per_s")
    if _known(rate) and _known(cap) and cap > 0 and rate >= THROTTLE_FULL_SHARE * cap:
        storage.append(f"read {rate:.0f} MB/s of the throttle's {cap:.0f} MB/s")
    return client, storage, delay_share


def limited_by(row: dict) -> tuple[str, str]:
    """(none | storage | client | unexplained | unmeasured, the evidence in words) for one run's row (module
    docstring); a cache-cold run whose device read less than its loaders says the page cache served the rest."""
    by, why = _limited_by(row)
    cache = cache_served(row)
    return by, f"{why}; {cache}" if cache else why


def _limited_by(row: dict) -> tuple[str, str]:
    au = float(row["au_percent"])
    thr = row.get("au_threshold_percent")
    if is_false(row.get("au_measured")) and (not _known(thr) or au >= float(thr)):
        return "unmeasured", not_measured(row)
    if (thrash := thrashed(row)) is not None:      # the cap's own reads, whatever the device showed
        return "client", thrash + f" (AU {au:.1f} %)"
    tb = row.get("throttle_au_bound_percent")
    bound = float(tb) if _known(tb) else 100.0
    if au >= bound - MARGIN_POINTS:
        if bound < 100.0 - MARGIN_POINTS and au > bound + MARGIN_POINTS:
            return "storage", (f"AU {au:.1f} % above the throttle's bound of {bound:.1f} %: the target delivered more "
                               "than its profile allows")
        if bound < 100.0 - MARGIN_POINTS:
            return "storage", f"AU {au:.1f} % at the throttle's bound of {bound:.1f} % (the target's profile)"
        return "none", f"AU {au:.1f} % within {MARGIN_POINTS:g} points of its bound of {bound:.0f} %"
    client, storage, delay = _evidence(row, bound)
    lost = f"{bound - au:.1f} points below its bound of {bound:.0f} %; {100 * delay:.0f} % of the lost time the emulator's own delays"
    if client and (not storage or delay >= 0.5):
        return "client", "; ".join(client + storage) + f" ({lost})"
    if storage:
        return "storage", "; ".join(storage + client) + f" ({lost})"
    if delay >= 0.5:
        return "client", f"accelerators late by themselves, no CPU saturated ({lost})"
    util = row.get("device_util_percent_avg")
    return "unexplained", (f"accelerators waited for data while the device was "
                           f"{f'{util:.0f} %' if _known(util) else 'not measured as'} busy and no CPU was saturated "
                           f"({lost})")


def point_cause(limited_bys) -> str:
    """One point's cause over its repeats: the cause they agree on, else 'uncertain (client × 1, storage × 1)'."""
    counts = pd.Series([str(x) for x in limited_bys]).value_counts()
    if len(counts) == 1:
        return str(counts.index[0])
    return "uncertain (" + ", ".join(f"{k} × {v}" for k, v in counts.items()) + ")"


def judge(au_percents, limited_bys, threshold_percent: float) -> str:
    """One accelerator count's verdict over its repeats: `pass` when the mean AU >= the threshold (but
    `unmeasured` when at least half its runs' AU was no measurement: window.py), else what limited its runs:
    `client` when at least half of them were client-limited, else `storage`."""
    aus, bys = list(au_percents), [str(x) for x in limited_bys]
    if sum(aus) / len(aus) >= threshold_percent:
        unmeasured = sum(1 for x in bys if x == "unmeasured")
        return "unmeasured" if unmeasured and 2 * unmeasured >= len(bys) else "pass"
    client = sum(1 for x in bys if x == "client")
    return "client" if client and 2 * client >= len(bys) else "storage"


def _verdicts(g, thr: float) -> dict[int, str]:
    by = g.limited_by if "limited_by" in g else pd.Series("storage", index=g.index)
    return {int(n): judge(x.au_percent, by[x.index], thr) for n, x in g.groupby("accelerators")}


def _fixed_list(verdicts: dict[int, str]) -> tuple[str, int | None, int, str]:
    """A fixed list: the largest passing N below the first client-limited (or unmeasured) failing N."""
    fails = [n for n in sorted(verdicts) if verdicts[n] != "pass"]
    stop = next((n for n in fails if verdicts[n] in ("client", "unmeasured")), None)
    ok = [n for n in verdicts if verdicts[n] == "pass" and (stop is None or n < stop)]
    best = max(ok, default=0)
    if not fails:
        return "none", best, best, f"{best}"
    if verdicts[fails[0]] == "client":
        return "client", None, best, f"client-limited at {fails[0]}"
    if verdicts[fails[0]] == "unmeasured":
        return "scale", None, best, outcome_text(None, "scale", fails[0], 0.0, passed=best)
    return "storage", best, best, f"{best}"


def _searched(g, verdicts: dict[int, str]) -> tuple[str, int | None, int, str]:
    """emulate.accelerators: auto (search.py), from its rows alone: what stopped the search and its answer."""

    fails = [n for n in sorted(verdicts) if verdicts[n] != "pass"]
    best = max((n for n in verdicts if verdicts[n] == "pass" and (not fails or n < fails[0])), default=0)
    elapsed = float(g.search_elapsed_s.max())
    if fails and verdicts[fails[0]] in ("client", "unmeasured"):
        limit, n = ("client" if verdicts[fails[0]] == "client" else "scale"), None
    elif fails:
        limit, n = ("storage" if fails[0] - best <= 1 else "budget"), best
    else:
        capped = best >= int(g.search_max.max())
        by_memory = "search_max_by" in g and (g.search_max_by.astype(str) == "memory").any()
        limit, n = ("memory" if capped and by_memory else "cap" if capped else "budget"), best
    return limit, n, best, outcome_text(n, limit, fails[0] if fails else None, elapsed, passed=best)


def supported(frame) -> pd.DataFrame:
    """Accelerators supported per workload and target (MLPerf Storage rule, with what limited it).

    Every accelerator count is judged on its repeats (judge: mean AU vs threshold, then what limited
    the failing runs). A fixed list: the largest passing N below the first client-limited failing N;
    when the first failing N was client-limited, the storage earned no number: `accelerators_supported`
    is empty and the text says `client-limited at N` (`accelerators_supported_at_least` = the largest
    passing N below it). A search (rows with `search_step`): what stopped it — storage (the boundary
    found), client, budget, cap or memory (the answer is then a floor, "≥ N").
    """
    rows = []
    for (w, t), g in frame.groupby(["workload", "target"], sort=False):
        thr = float(g.au_threshold_percent.iloc[0])
        au = g.groupby("accelerators").au_percent.mean()
        verdicts = _verdicts(g, thr)
        search = "search_step" in g and bool(g.search_step.notna().any())
        limit, n, best, text = _searched(g, verdicts) if search else _fixed_list(verdicts)
        fails = [k for k in sorted(verdicts) if verdicts[k] != "pass"]
        if limit == "scale" and (files := files_for_window(g[g.accelerators == fails[0]].iloc[0].to_dict())):
            text = text[:-1] + f"; a data set of {files:,} files or more, or the paper profile, answers it)"
        rows.append({"workload": w, "target": t, "au_threshold_percent": thr,
                     "accelerators_supported": n, "accelerators_supported_text": text,
                     "supported_limited_by": limit, "accelerators_supported_at_least": best,
                     "first_failing_accelerators": fails[0] if fails else None,
                     "au_percent_at_supported": float(au[best]) if best else float("nan"),
                     "max_accelerators_tested": int(au.index.max()),
                     "limited_by_sweep": bool(best == int(au.index.max()) and limit not in ("client", "scale")),
                     "searched": search,
                     "search_elapsed_s": float(g.search_elapsed_s.max()) if search else float("nan"),
                     "search_budget_s": float(g.search_budget_s.max()) if search else float("nan"),
                     "search_probes": (",".join(str(int(k)) for k in g.sort_values("search_step")
                                                .accelerators.drop_duplicates()) if search else "")})
    out = pd.DataFrame(rows)
    if not out.empty:
        out["accelerators_supported"] = out.accelerators_supported.astype("Int64")
        out["first_failing_accelerators"] = out.first_failing_accelerators.astype("Int64")
    return out


def plain_records(sup: pd.DataFrame) -> list[dict]:
    """supported() rows as JSON-ready dicts (missing = None)."""
    out = []
    for rec in sup.to_dict("records"):
        out.append({k: (None if v is pd.NA or (isinstance(v, float) and math.isnan(v))
                        else v.item() if hasattr(v, "item") else v) for k, v in rec.items()})
    return out


def outcome_text(answer: int | None, limited_by: str, first_fail: int | None, elapsed_s: float,
                 passed: int = 0) -> str:
    """'3 (storage-limited)', 'client-limited at 8', '≥ 4 (search budget reached after 52 s)', '≥ 64 (search cap)',
    'not answered at this scale (…)' when the count after the last passing one (`passed`) was no measurement."""
    if limited_by == "client":
        return f"client-limited at {first_fail}"
    if limited_by == "scale":
        return (f"not answered at this scale ({passed} passed; at {first_fail} AU was no measurement: too few steps, "
                "prefetch carried its window)")
    if limited_by == "storage":
        return f"{answer} (storage-limited)"
    if limited_by == "cap":
        return f"≥ {answer} (the largest count the search may try)"
    if limited_by == "memory":
        return f"≥ {answer} (more accelerators' data would not fit the memory this run allows for caching)"
    fails = f"; fails at {first_fail}" if first_fail is not None else ""
    return f"≥ {answer} (search budget reached after {elapsed_s:.0f} s{fails})"


# --------------------------------------------------------------------------- client check (kit/client_check.py)
def _valid(frame):
    """Rows that measured what they say: failed runs (an S3 store that failed: objects.py), disturbed runs a
    later row re-ran (core/reruns.py) and, under emulate.mlperf_rules, each point's warm-up run (mlperf.py) left
    out."""
    frame = reruns.kept(frame)
    if "status" in frame:
        frame = frame[frame.status.astype(str) != "failed"]
    if "mlperf_run" in frame:
        frame = frame[frame.mlperf_run.astype(str) != "warm-up"]
    return frame


def measured(frame):
    """The sweep's own scored rows: valid ones (_valid) less the client check's confined re-runs (they answer
    another question)."""
    return unchecked(_valid(frame))


# Each confined re-run against the same point's own repeats: a move beyond the repeats' spread makes the
# point client-bound.
FIGURES = ("au_percent", "samples_per_s")


def client_checks(frame) -> list[dict]:
    """Per workload, target and N that was re-run confined: the verdict, the figures and one sentence."""
    return client_check.verdicts(_valid(frame), ["workload", "target", "accelerators"],
                                 lambda rows: {k: list(rows[k]) for k in FIGURES},
                                 lambda k: f"{k[1]}, {k[0]} at N = {int(k[2])}")


def answer_note(frame, workload: str, target: str) -> str:
    """What page 1 says next to the answer: the check's verdict on this workload and target, or ''."""
    for c in client_checks(frame):
        if c["workload"] == workload and c["target"] == target:
            return client_check.short_note(c, f" at N = {c['accelerators']}")
    return ""
