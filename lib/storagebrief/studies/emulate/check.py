"""The client check's verdict from runs.csv: each confined re-run against the same point's own repeats
(kit/client_check.py holds the rule: a move beyond the repeats' spread makes the point client-bound)."""
from __future__ import annotations

from ...kit.client_check import sensitivity, verdict_text
from .plan import checks, measured

FIGURES = ("au_percent", "samples_per_s")


def client_checks(frame) -> list[dict]:
    """Per workload, target and N that was re-run confined: the verdict, the figures and one sentence."""
    out = []
    conf = checks(frame)
    base = measured(frame)
    for (w, t, n), g in conf.groupby(["workload", "target", "accelerators"], sort=False):
        b = base[(base.workload == w) & (base.target == t) & (base.accelerators == n)]
        if b.empty:
            continue
        res = sensitivity({k: list(b[k]) for k in FIGURES}, {k: list(g[k]) for k in FIGURES})
        cpus, of = int(g.cpus_confined.iloc[0]), int(b.client_cores.max()) if "client_cores" in b else 0
        out.append({"workload": w, "target": t, "accelerators": int(n), "client_bound": res["client_bound"],
                    "cpus_confined": cpus, "cpus_all": of, "confinement": str(g.cpu_confinement.iloc[0]),
                    "repeats": len(b), "confined_runs": len(g), "figures": res["figures"],
                    "text": verdict_text(res, cpus, of, f"{t}, {w} at N = {int(n)}")})
    return out


def answer_note(frame, workload: str, target: str) -> str:
    """What page 1 says next to the answer: the check's verdict on this workload and target, or ''."""
    for c in client_checks(frame):
        if c["workload"] == workload and c["target"] == target:
            return (f"client check at N = {c['accelerators']} on {c['cpus_confined']} of {c['cpus_all']} CPUs: "
                    + ("client-bound (AU or samples/s moved beyond the repeats' spread)" if c["client_bound"]
                       else "not client-sensitive"))
    return ""
