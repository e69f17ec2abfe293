"""What limited a run (storage, the client, neither), and accelerators supported with it.

The client is the machine that runs the emulated accelerators. Its own CPU is
measured: every accelerator process reports its user + system CPU seconds over the
run (resource.getrusage(RUSAGE_SELF): the process and all its loader threads) and
the CPUs it may run on (sched_getaffinity). The machine's CPU use over the run comes
from the monitor (`cpu_busy_percent`, all CPUs, everything running on them).

Rule (`limited_by`, the evidence in the row's columns and in words in `limited_by_reason`):
  none     au_percent >= the workload's AU threshold;
  client   AU below it, and the client was the reason: it had no CPU headroom
           (the machine busy >= CPU_SATURATED_PERCENT of the time, `cpu_busy_percent`,
           or the accelerators' own CPU time >= CPU_SATURATED_PERCENT of the CPUs they
           may run on, `client_cpu_percent_of_cores`), or its accelerators were late
           by themselves: with their own measured delays removed (sleep overshoot of
           the accelerator that closed each step, barrier release) AU would have met
           the threshold (`au_percent_overhead_removed`). Late wake-ups and slow
           barriers are CPU scheduling on the client, never storage; they show up
           even when the average CPU is not saturated (many processes on few cores
           queue for a CPU at every step);
  storage  AU below the threshold otherwise: the accelerators waited for data.
A client-limited run says nothing about the storage: "accelerators supported"
reports `client-limited at N` when the first failing accelerator count was
client-limited, instead of a number the storage did not earn.
"""
from __future__ import annotations

import math

import pandas as pd

CPU_SATURATED_PERCENT = 90.0    # busier than this = no CPU headroom


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
    return {"client_cpu_s": total,
            "client_cpu_s_per_step": total / steps if steps else float("nan"),   # one synchronous step, all accelerators
            "client_cpu_s_per_gb": total / (loader_bytes / 1e9) if loader_bytes else float("nan"),
            "client_cores": n_cores,
            "client_cpu_percent_of_cores": 100.0 * total / (total_time_s * n_cores) if total_time_s > 0 else float("nan")}


def limited_by(au_percent: float, threshold_percent: float, cpu_busy_percent: float | None,
               client_cpu_percent_of_cores: float | None,
               au_percent_overhead_removed: float | None = None) -> tuple[str, str]:
    """(storage | client | none, the evidence in words) for one run (the rule in the module docstring)."""
    def known(x):
        return x is not None and not (isinstance(x, float) and math.isnan(x))

    if au_percent >= threshold_percent:
        return "none", f"AU {au_percent:.1f} % >= {threshold_percent:.0f} %"
    if known(cpu_busy_percent) and cpu_busy_percent >= CPU_SATURATED_PERCENT:
        return "client", f"machine CPU busy {cpu_busy_percent:.0f} % of the run"
    if known(client_cpu_percent_of_cores) and client_cpu_percent_of_cores >= CPU_SATURATED_PERCENT:
        return "client", f"accelerators used {client_cpu_percent_of_cores:.0f} % of their CPUs"
    if known(au_percent_overhead_removed) and au_percent_overhead_removed >= threshold_percent:
        return "client", (f"accelerators late (sleep overshoot, barrier): AU {au_percent_overhead_removed:.1f} % "
                          "without their own delays")
    return "storage", "accelerators waited for data"


def _verdict(runs) -> str:
    """What limited the runs at one accelerator count: the majority; a tie counts as client."""
    client = int((runs.limited_by == "client").sum()) if "limited_by" in runs else 0
    return "client" if client and 2 * client >= len(runs) else "storage"


def supported(frame) -> pd.DataFrame:
    """Accelerators supported per workload and target (MLPerf Storage rule, with what limited it).

    Largest N whose mean AU >= threshold, below the first client-limited failing N.
    When the first failing N was client-limited, the storage earned no number:
    `accelerators_supported` is empty and the text says `client-limited at N`
    (`accelerators_supported_at_least` = the largest passing N below it).
    """
    rows = []
    for (w, t), g in frame.groupby(["workload", "target"], sort=False):
        thr = float(g.au_threshold_percent.iloc[0])
        au = g.groupby("accelerators").au_percent.mean()
        fails = [int(n) for n in au.index if au[n] < thr]
        by = {n: _verdict(g[g.accelerators == n]) for n in fails}
        client_fail = next((n for n in fails if by[n] == "client"), None)
        below = au[au.index < client_fail] if client_fail is not None else au
        ok = below[below >= thr]
        best = int(ok.index.max()) if not ok.empty else 0
        if not fails:
            limit, n, text = "none", best, f"{best}"
        elif by[fails[0]] == "client":
            limit, n, text = "client", None, f"client-limited at {fails[0]}"
        else:
            limit, n, text = "storage", best, f"{best}"
        rows.append({"workload": w, "target": t, "au_threshold_percent": thr,
                     "accelerators_supported": n, "accelerators_supported_text": text,
                     "supported_limited_by": limit, "accelerators_supported_at_least": best,
                     "first_failing_accelerators": fails[0] if fails else None,
                     "au_percent_at_supported": float(au[best]) if best else float("nan"),
                     "max_accelerators_tested": int(au.index.max()),
                     "limited_by_sweep": bool(best == int(au.index.max()) and limit != "client")})
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
