"""Page 1's one answer per workload and target to "how many accelerators can this storage feed?".

Two studies answer it: the emulate study measures it (the largest accelerator count that kept AU at
its threshold, what failed next and what limited that) and the transfer-size study forecasts it from
fio's curve (forecast.csv). Page 1 gives one row: the measured count with its range and what limited
it beyond ("8 (range 8–15; client-limited beyond)": 8 passed, 16 failed, counts between were not run),
then the forecast, reconciled with it or the gap explained in one sentence. A count that failed is
never written as the answer. Without the emulate study the forecast is the answer; without the
forecast, the emulated count is. What limited a failing count is read from the emulate study's
`supported_limited_by` as it is written (client, storage, ...), not from a fixed list of causes.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd

QUESTION = "Accelerators supported"   # the page-1 layout check looks for it on every target
# The per-study answers this replaces (emulate's and the transfer-size study's own page-1 rows).
REPLACES_PREFIX = "Accelerators supported"
# What stopped an emulate search without a failing count the storage or client caused.
FLOORS = {"budget": "search budget reached", "cap": "search cap reached", "memory": "page-cache cap reached",
          "none": "no count tested failed",
          "": "no count tested failed"}
# The same stops in words a reader of page 1 needs no study's settings for (its footnote; scorecard.py).
UNSETTLED = {"budget": "the search ran out of time before a count of accelerators fell short",
             "cap": "the largest count the search may try still kept up",
             "memory": "more accelerators' data would not fit the memory this run allows for caching",
             "scale": "the runs at more accelerators were too short for their utilization to be a measurement "
                      "(data read ahead carried them); a larger data set answers it",
             "": "every count tried kept up; a larger one was not tried"}


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _csv(path: Path) -> pd.DataFrame | None:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError):
        return None


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _per_count(frame: pd.DataFrame | None, workload: str, target: str, col: str) -> dict[int, float]:
    """Mean of a runs.csv column per accelerator count, for one workload and target ({} if absent)."""
    if frame is None or col not in frame or "accelerators" not in frame:
        return {}
    g = frame[(frame.workload == workload) & (frame.target == target)]
    # the scored runs only: a client check's re-run (half the CPUs) answers another question, a failed run
    # measured nothing (AU 41 % of a confined re-run averaged into its point's 97 % read "11 passed (AU 78.7 %)")
    if "client_check" in g:
        g = g[g.client_check.isna() | (g.client_check.astype(str) == "")]
    if "status" in g:
        g = g[g.status.astype(str) != "failed"]
    if "mlperf_run" in g:
        g = g[g.mlperf_run.astype(str) != "warm-up"]
    return {int(n): float(v) for n, v in g.groupby("accelerators")[col].mean().items() if not pd.isna(v)}


def emulated(study) -> dict[tuple[str, str], dict]:
    """(workload, target) -> the emulate study's answer: lowest/highest count the answer can be, what
    limited the first failing count, AU and loader MB/s per count."""
    if study is None:
        return {}
    recs = _json(study.dir / "mlperf_results.json").get("accelerators_supported") or []
    out = {}
    for r in recs:
        w, t = r.get("workload"), r.get("target")
        lo = _num(r.get("accelerators_supported_at_least"))
        lo = int(lo if lo is not None else (_num(r.get("accelerators_supported")) or 0))
        ff = _num(r.get("first_failing_accelerators"))
        out[(w, t)] = {"low": lo, "first_fail": int(ff) if ff is not None else None,
                       "high": int(ff) - 1 if ff is not None else None,
                       "limited_by": str(r.get("supported_limited_by") or ""),
                       "threshold": _num(r.get("au_threshold_percent")),
                       "au": _per_count(study.frame, w, t, "au_percent"),
                       "loader_mb_per_s": _per_count(study.frame, w, t, "loader_read_mb_per_s")}
    return out


def forecasts(study) -> dict[tuple[str, str], dict]:
    """(workload, target) -> the idle-system forecast row of forecast.csv (the emulate study ran idle)."""
    fc = _csv(study.dir / "forecast.csv") if study is not None else None
    if fc is None or fc.empty:
        return {}
    idle = fc[fc.load == "idle"] if (fc.load == "idle").any() else fc
    return {(r["workload"], r["target"]): r for r in idle.to_dict("records")}


def answer_text(e: dict) -> str:
    """'8 (range 8–15; client-limited beyond)', '3 (storage-limited beyond)', '≥ 4 (search budget reached)'."""
    lo, hi, by = e["low"], e["high"], e["limited_by"]
    if by == "scale":     # the next count's AU was no measurement: no floor, no range (emulate/window.py)
        return f"not answered at this scale ({lo} passed; at {e['first_fail']} the run was too short to measure)"
    if floor(e):
        return f"≥ {lo} ({FLOORS.get(by, by + '-limited beyond')})"
    span = f"range {lo}–{hi}; " if hi > lo else ""
    return f"{lo} ({span}{by}-limited beyond)"


def floor(e: dict) -> bool:
    """The count is a floor: the search stopped before a count failed (no failing count, or a budget, cap or
    page-cache stop)."""
    return e["first_fail"] is None or e["limited_by"] in ("budget", "cap", "memory", "scale")


def short_text(e: dict) -> str:
    """Page 1's cell: '8 accelerators · client-bound beyond'; a floor '≥ 4 accelerators · not settled' (why in
    its footnote, unsettled(); the chapter's answer keeps the search's own reason)."""
    lo, by = e["low"], e["limited_by"]
    count = f"{lo} accelerator{'' if lo == 1 else 's'}"
    if by == "scale":
        return "not answered at this scale"
    if floor(e):
        return f"≥ {count} · not settled"
    return f"{count} · {by}-bound beyond"


def unsettled(e: dict) -> str:
    """Why a floor is not settled, in plain words ('' when the count is settled)."""
    if not floor(e):
        return ""
    by = e["limited_by"]
    return UNSETTLED.get(by if by in UNSETTLED else "", UNSETTLED[""])


def short_note(e: dict, f: dict | None, extra: str) -> str:
    """Page 1's one-line caveat: a client check that found the run CPU-sensitive makes the count uncertain;
    a forecast that disagrees says which way."""
    words = []
    if re.search(r"(?<!not )client-(?:sensitive|bound)\b", extra):     # the check's verdict, not "not client-…"
        words.append("uncertain: a rerun on half the CPUs changed the result, so the CPU, not only the storage, "
                     "may set this count")
    if f is not None:
        n = int(f["accelerators_forecast"])
        lo, hi = e["low"], e["high"]
        words.append(f"fio's forecast, {n}, " + ("agrees" if n >= lo and (hi is None or n <= hi) else
                                                  "is higher" if n > (hi if hi is not None else n) else "is lower"))
    return "; ".join(words)


def _au(e: dict, n: int | None) -> str:
    v = e["au"].get(n) if n is not None else None
    return f" (AU {v:.1f} %)" if v is not None else ""


def _measured(e: dict) -> str:
    text = f"emulated: {e['low']} passed{_au(e, e['low'])}" if e["low"] else "emulated: no count passed"
    if e["limited_by"] == "scale":
        text += (f", {e['first_fail']} not measured{_au(e, e['first_fail'])}: its runs too short for AU to be a "
                 "measurement")
    elif e["first_fail"] is not None:
        text += f", {e['first_fail']} failed{_au(e, e['first_fail'])}, limited by {e['limited_by'] or 'unknown'}"
    else:
        text += ", none failed"
    return text


def _forecast(f: dict) -> str:
    used = _num(f.get("throughput_used_mb_per_s"))
    qd = _num(f.get("queue_depth_used"))
    stat = f.get("curve_statistic") or "mean of repeats"
    capped = " (capped at the profile's allowance)" if str(f.get("capped_by_profile")) == "True" else ""
    basis = (f" from {used:,.0f} MB/s{capped} ({stat}, QD {int(qd)}; "
             f"{_num(f.get('demand_mb_per_s_per_accelerator')):,.1f} MB/s per accelerator)" if used and qd else "")
    return f"fio forecast {int(f['accelerators_forecast'])}{basis}"


def reconcile(e: dict, f: dict) -> str:
    """One sentence: the forecast agrees with the measured range, or why it is higher or lower."""
    n = int(f["accelerators_forecast"])
    lo, hi, by = e["low"], e["high"], e["limited_by"]
    if by == "scale" and n > lo:
        return (f"The forecast ({n}) is above the {lo} measured; the emulation's runs at more accelerators were too "
                "short to measure, so it neither confirms nor contradicts it.")
    if n >= lo and (hi is None or n <= hi):
        return f"The forecast ({n}) agrees with the measured range."
    used = _num(f.get("throughput_used_mb_per_s")) or 0.0
    if n > (hi if hi is not None else n):
        if by != "storage":
            return (f"The forecast ({n}) is higher because it assumes the client can run every loader; the "
                    f"{by or 'run'} limited the emulation at {e['first_fail']} first.")
        drew = e["loader_mb_per_s"].get(e["first_fail"])
        drew_text = f" ({drew:,.0f} MB/s)" if drew is not None else ""
        return (f"The forecast ({n}) is higher: fio's {used:,.0f} MB/s (direct reads, fixed queue depth) is more "
                f"than the loaders drew at {e['first_fail']}{drew_text}; the measured count stands.")
    drew = e["loader_mb_per_s"].get(lo)
    drew_text = f" drew {drew:,.0f} MB/s at {lo}" if drew is not None else f" sustained {lo}"
    return (f"The forecast ({n}) is lower: the emulated loaders{drew_text}, more than fio's {used:,.0f} MB/s "
            "(its worse repeat, direct I/O, no page cache), so the measured count stands and the forecast is "
            "conservative.")


def answers(emulate_study, sweep_study, emulate_rows: list[dict] | None = None) -> list[dict]:
    """One page-1 row per (workload, target) the two studies answer; emulate_rows: the emulate study's own
    page-1 rows, whose basis is kept beside the reconciled one."""
    emu, fc = emulated(emulate_study), forecasts(sweep_study)
    rows = []
    for key in list(dict.fromkeys([*emu, *fc])):
        w, t = key
        e, f = emu.get(key), fc.get(key)
        thr = (e or {}).get("threshold") or _num((f or {}).get("au_threshold_percent"))
        question = f"{QUESTION} ({w}, AU ≥ {thr:g} %)" if thr is not None else f"{QUESTION} ({w})"
        if e is None:
            rows.append({"question": question, "target": t,
                         "answer": f"{int(f['accelerators_forecast'])} (fio forecast; not emulated)",
                         "short": f"{int(f['accelerators_forecast'])} accelerators", "note": "fio forecast, not emulated",
                         "basis": f"{_forecast(f)}; {f.get('forecast_limited_by', '')}; transfer-size study"})
            continue
        basis = _measured(e)
        if f is not None:
            basis += f"; {_forecast(f)}. {reconcile(e, f)}"
        own = [r.get("basis", "") for r in emulate_rows or []
               if r.get("target") == t and f"({w}," in str(r.get("question", ""))]
        # the emulate study's own basis, less what the reconciled text already says (its search and cause)
        extra = re.sub(r"^search of N \(probed ([^)]*)\), limited by [^;]*", r"probed \1", own[0]) if own else ""
        extra = re.sub(r";? ?emulate study\.?$", "", extra).strip()
        # the answer says "≥ N (no count tested failed)" already: three lines of page 1 a target (its 23-page budget)
        extra = re.sub(r"^every count tested kept AU ≥ threshold: the largest tested is a floor;? ?", "", extra)
        if extra:
            basis += f"{'' if basis.endswith('.') else '.'} Emulate study: {extra}."
        rows.append({"question": question, "target": t, "answer": answer_text(e), "basis": basis,
                     "short": short_text(e), "note": short_note(e, f, extra),
                     **({"unsettled": unsettled(e)} if floor(e) else
                        {"quote": quote(e, w, thr, _json(emulate_study.dir / "study.json"))})})
    return rows


def quote(e: dict, workload: str, threshold: float | None, study: dict) -> dict:
    """Page 1's quotable finding of a settled count (brief/quotes.py): 'feeds 1 emulated accelerator,
    storage-bound beyond' under 'Emulated training (unet3d on V100s, AU ≥ 90 %)'."""
    lo, hi = e["low"], e["high"]
    acc = str(study.get("accelerator_type") or "").upper()
    count = f"{lo}–{hi}" if hi is not None and hi > lo else f"{lo}"
    lead = (f"Emulated training ({workload}{f' on {acc}s' if acc else ''}"
            + (f", AU ≥ {threshold:g} %" if threshold is not None else "") + ")")
    return {"lead": lead, "says": f"feeds {count} emulated accelerator{'' if count == '1' else 's'}, "
                                  f"{e['limited_by'] or 'unknown'}-bound beyond"}
