"""The emulate brief's object-storage parts: directory vs S3 on the same device (AU and samples/s at the same N),
what page 1 says about S3 targets, and S3 targets whose store failed."""
from __future__ import annotations

import pandas as pd

from ...report.display import show_md, show_table
from ...report.words import plural
from .limits import point_cause


def pairs(desc: dict) -> list[tuple[str, str]]:
    """(directory, local-gateway S3 target) on one device and profile, as prepare() found them (study.json)."""
    return [tuple(x) for x in desc.get("s3_pairs", [])]


def comparison(frame, desc: dict) -> pd.DataFrame:
    """Per pair, workload and N run on both: mean AU and samples/s each side (min–max over repeats), S3 ÷ directory,
    and what limited each side's runs."""
    rows = []
    for d, s in pairs(desc):
        for w, g in frame[frame.target.isin([d, s])].groupby("workload", sort=False):
            a, b = g[g.target == d], g[g.target == s]
            for n in sorted(set(a.accelerators) & set(b.accelerators)):
                x, y = a[a.accelerators == n], b[b.accelerators == n]
                rows.append({"Workload": w, "Directory": d, "S3": s, "N": int(n), "Runs": f"{len(x)} / {len(y)}",
                             "AU % dir": x.au_percent.mean(), "AU % S3": y.au_percent.mean(),
                             "AU % S3 (min–max)": f"{y.au_percent.min():.1f}–{y.au_percent.max():.1f}",
                             "Samples/s dir": x.samples_per_s.mean(), "Samples/s S3": y.samples_per_s.mean(),
                             "S3 ÷ dir samples/s": y.samples_per_s.mean() / x.samples_per_s.mean(),
                             "Gateway CPU s/GB": y.gateway_cpu_s_per_gb.mean() if "gateway_cpu_s_per_gb" in y else None,
                             "Client CPU s/GB dir / S3": f"{x.client_cpu_s_per_gb.mean():.2g} / "
                                                          f"{y.client_cpu_s_per_gb.mean():.2g}",
                             "Limited by dir / S3": f"{point_cause(x.limited_by)} / {point_cause(y.limited_by)}"})
    return pd.DataFrame(rows)


def section(frame, full, desc: dict) -> None:
    """The directory-vs-S3 table (nothing when no pair ran), and S3 targets whose store failed."""
    _failed(full)
    tab = comparison(frame, desc)
    if tab.empty:
        return
    worst = tab.loc[tab["S3 ÷ dir samples/s"].idxmin()]
    show_md(f"**Directory vs S3 on the same device.** The same dataset, generated identically, read as files and as "
            "objects through a local S3 gateway (versitygw, its objects plain files on the same disk, under the same "
            "profile): each sample one GET of the bytes the file loader reads, streamed in the same read size, made "
            "by a compiled client (Go with minio-go) that hands each accelerator counts, not bytes, so a low ratio is "
            "the object path's and the gateway's cost, not a Python HTTP client's. The "
            f"largest cost: {worst['S3']} delivered {worst['S3 ÷ dir samples/s']:.2f} × the samples/s of "
            f"{worst['Directory']} at N = {worst['N']} ({worst['Workload']}). The gateway runs on this machine: its "
            "CPU and the client's share the same cores, so on a small client a low ratio can be the CPU's, not the "
            "object path's; 'Limited by' says which.")
    show_table(tab, "Directory vs S3 at the same accelerator count, means over repeats. S3 ÷ dir < 1: the object path "
                    "delivered fewer samples/s. Gateway CPU s/GB: the local gateway's CPU per 10⁹ bytes the loaders "
                    "read.", floatfmt="{:,.3g}")


def _failed(full) -> None:
    if "status" not in full:
        return
    bad = full[full.status.astype(str) == "failed"]
    for t, g in bad.groupby("target", sort=False):
        show_md(f"**{t}: {plural(len(g), 'run')} failed.** {g.failure_reason.iloc[0]}")


def answer_basis(desc: dict, target: str) -> str:
    """What page 1 adds to an S3 target's answer: how it was read, and its same-device directory."""
    obj = desc.get("object_targets", {}).get(target)
    if not obj:
        return ""
    how = "local S3 gateway (versitygw)" if obj.get("gateway") else f"S3 endpoint {obj.get('endpoint', '')}"
    twin = [d for d, s in pairs(desc) if s == target]
    return f"read as objects (Go client) through a {how}" + (f", same device as '{twin[0]}'" if twin else "")


def failed_answers(full, workloads: list[str]) -> list[dict]:
    """Page 1 for an S3 target with no successful run: not measured, and why."""
    if "status" not in full:
        return []
    out = []
    for t, g in full.groupby("target", sort=False):
        if (g.status.astype(str) == "failed").all():
            for w in workloads:
                out.append({"question": f"Accelerators supported, emulated ({w})", "target": t,
                            "answer": "not measured", "basis": f"{g.failure_reason.iloc[0]}; emulate study"})
    return out
