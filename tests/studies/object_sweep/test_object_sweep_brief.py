"""The object sweep's brief section (studies/object_sweep/brief.py, issue 44): a missing points.csv or pairs.csv is
named, not read as "nothing measured"."""
from __future__ import annotations

import pandas as pd

from storagebrief import studies


def test_object_sweep_names_its_missing_side_files(tmp_path):
    """The same rule in the object sweep: a missing points.csv or pairs.csv is named, not "No pair ran"."""
    import IPython.display
    obj = studies.get("object_sweep")
    shown = []
    saved = IPython.display.display
    IPython.display.display = lambda *objs, **kw: shown.extend(str(getattr(o, "data", "")) for o in objs)
    try:
        frame = pd.DataFrame([{"target": "a", "status": "ok", "failure_reason": ""}])
        obj.brief_section(tmp_path, frame, ["a"])
    finally:
        IPython.display.display = saved
    text = "\n".join(shown)
    assert "missing: points.csv" in text and "missing: pairs.csv" in text
    assert "No object points were measured" not in text and "No pair ran" not in text
