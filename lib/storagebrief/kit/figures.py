"""Figures more than one study draws."""
from __future__ import annotations


def metric_vs(ax, data, x: str, y: str, names: list[str], kind: str = "line", palette=None, legend="auto"):
    """A metric against a sweep variable, one colour per target (hue order: the targets'), means with
    ±1 sd over repeats as error bars: `kind` "line" (markers at each value) or "bar"."""
    import seaborn as sns

    from ..report.display import target_colors

    common = dict(data=data, x=x, y=y, hue="target", hue_order=names, errorbar="sd", ax=ax,
                  palette=palette if palette is not None else target_colors(names))
    if kind == "bar":
        return sns.barplot(**common)
    if kind == "line":
        return sns.lineplot(marker="o", legend=legend, **common)
    raise ValueError(f"kind '{kind}': line or bar")
