"""kit.figures: a metric against a sweep variable, one colour per target, ±1 sd over repeats."""
from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("seaborn")


def _frame():
    return pd.DataFrame({"target": ["a", "a", "b", "b"] * 2, "n": [1, 1, 1, 1, 2, 2, 2, 2],
                         "y": [1.0, 3.0, 10.0, 12.0, 2.0, 4.0, 20.0, 22.0]})


@pytest.mark.parametrize("kind", ["line", "bar"])
def test_one_colour_per_target_in_the_targets_order(kind):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from storagebrief.kit.figures import metric_vs
    from storagebrief.report.display import target_colors
    fig, ax = plt.subplots()
    metric_vs(ax, _frame(), "n", "y", ["b", "a"], kind=kind)
    from matplotlib.colors import to_rgb
    _, labels = ax.get_legend_handles_labels()
    assert labels == ["b", "a"]                                  # hue order = the targets given
    colors = {k: to_rgb(v) for k, v in target_colors(["b", "a"]).items()}

    def nearest(rgb):
        return min(colors, key=lambda k: sum((x - y) ** 2 for x, y in zip(colors[k], to_rgb(rgb))))
    if kind == "line":
        assert [to_rgb(line.get_color()) for line in ax.lines[:2]] == [colors["b"], colors["a"]]
        assert len(ax.collections) >= 2                          # the ±1 sd band of each target
    else:                                                        # seaborn desaturates bars: nearest colour
        assert [nearest(p.get_facecolor()) for p in ax.patches[:4]] == ["b", "b", "a", "a"]
        assert len(ax.lines) == 4                                # an sd error bar on every bar
    plt.close(fig)


def test_an_unknown_kind_is_refused():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from storagebrief.kit.figures import metric_vs
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="line or bar"):
        metric_vs(ax, _frame(), "n", "y", ["a", "b"], kind="pie")
    plt.close(fig)
