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


def judge(au_percents, limited_bys, threshold_percent: float) -> str:
    """One accelerator count's verdict over its repeats: `pass` when the mean AU >= the threshold,
    else what limited its runs: `client` when at least half of them were client-limited, else `storage`."""
    aus, bys = list(au_percents), [str(x) for x in limited_bys]
    if sum(aus) / len(aus) >= threshold_percent:
        return "pass"
    client = sum(1 for x in bys if x == "client")
    return "client" if client and 2 * client >= len(bys) else "storage"


def _verdicts(g, thr: float) -> dict[int, str]:
    by = g.limited_by if "limited_by" in g else pd.Series("storage", index=g.index)
    return {int(n): judge(x.au_percent, by[x.index], thr) for n, x in g.groupby("accelerators")}


def _fixed_list(verdicts: dict[int, str]) -> tuple[str, int | None, int, str]:
    """A fixed list: the largest passing N below the first client-limited failing N."""
    fails = [n for n in sorted(verdicts) if verdicts[n] != "pass"]
    client_fail = next((n for n in fails if verdicts[n] == "client"), None)
    ok = [n for n in verdicts if verdicts[n] == "pass" and (client_fail is None or n < client_fail)]
    best = max(ok, default=0)
    if not fails:
        return "none", best, best, f"{best}"
    if verdicts[fails[0]] == "client":
        return "client", None, best, f"client-limited at {fails[0]}"
    return "storage", best, best, f"{best}"


def _searched(g, verdicts: dict[int, str]) -> tuple[str, int | None, int, str]:
    """emulate.accelerators: auto (search.py), from its rows alone: what stopped the search and its answer."""

    fails = [n for n in sorted(verdicts) if verdicts[n] != "pass"]
    best = max((n for n in verdicts if verdicts[n] == "pass" and (not fails or n < fails[0])), default=0)
    elapsed = float(g.search_elapsed_s.max())
    if fails and verdicts[fails[0]] == "client":
        limit, n = "client", None
    elif fails:
        limit, n = ("storage" if fails[0] - best <= 1 else "budget"), best
    else:
        limit, n = ("cap" if best >= int(g.search_max.max()) else "budget"), best
    return limit, n, best, outcome_text(n, limit, fails[0] if fails else None, elapsed)


def supported(frame) -> pd.DataFrame:
    """Accelerators supported per workload and target (MLPerf Storage rule, with what limited it).

    Every accelerator count is judged on its repeats (judge: mean AU vs threshold, then what limited
    the failing runs). A fixed list: the largest passing N below the first client-limited failing N;
    when the first failing N was client-limited, the storage earned no number: `accelerators_supported`
    is empty and the text says `client-limited at N` (`accelerators_supported_at_least` = the largest
    passing N below it). A search (rows with `search_step`): what stopped it — storage (the boundary
    found), client, budget or cap (the answer is then a floor, "≥ N").
    """
    rows = []
    for (w, t), g in frame.groupby(["workload", "target"], sort=False):
        thr = float(g.au_threshold_percent.iloc[0])
        au = g.groupby("accelerators").au_percent.mean()
        verdicts = _verdicts(g, thr)
        search = "search_step" in g and bool(g.search_step.notna().any())
        limit, n, best, text = _searched(g, verdicts) if search else _fixed_list(verdicts)
        fails = [k for k in sorted(verdicts) if verdicts[k] != "pass"]
        rows.append({"workload": w, "target": t, "au_threshold_percent": thr,
                     "accelerators_supported": n, "accelerators_supported_text": text,
                     "supported_limited_by": limit, "accelerators_supported_at_least": best,
                     "first_failing_accelerators": fails[0] if fails else None,
                     "au_percent_at_supported": float(au[best]) if best else float("nan"),
                     "max_accelerators_tested": int(au.index.max()),
                     "limited_by_sweep": bool(best == int(au.index.max()) and limit != "client"),
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


def outcome_text(answer: int | None, limited_by: str, first_fail: int | None, elapsed_s: float) -> str:
    """'3 (storage-limited)', 'client-limited at 8', '≥ 4 (search budget reached after 52 s)', '≥ 64 (search cap)'."""
    if limited_by == "client":
        return f"client-limited at {first_fail}"
    if limited_by == "storage":
        return f"{answer} (storage-limited)"
    if limited_by == "cap":
        return f"≥ {answer} (search cap: emulate.search_max)"
    fails = f"; fails at {first_fail}" if first_fail is not None else ""
    return f"≥ {answer} (search budget reached after {elapsed_s:.0f} s{fails})"
