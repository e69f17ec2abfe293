"""What each study's tests cost: `python tests/suite_costs.py JUNIT.xml` (from `pytest --junitxml=JUNIT.xml`)
prints a Markdown table, one row per registered study, then the shared tests, as docs/testing.md shows it.

A test belongs to a study when it lives in tests/studies/<study>/ or is a case of a test parametrized over the
registry (its id names the study: `test_every_study.py::…[checkpoint]`); every other test is shared. Seconds
are each test's set-up + call + tear-down as pytest's JUnit report gives them (worker time: under `make test`'s
two workers they add up to about twice the wall clock)."""
from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

STUDY_DIR = re.compile(r"^tests[./]studies[./](\w+)[./]")


def study_of(classname: str, name: str, studies: list[str]) -> str:
    """The study a JUnit testcase (classname as pytest writes it: dotted path, name with its [id]) belongs to."""
    found = STUDY_DIR.match(classname)
    if found and found.group(1) in studies:
        return found.group(1)
    ids = re.findall(r"\[([^\]]*)\]", name)
    for part in (re.split(r"[-,]", ids[-1]) if ids else []):
        if part in studies:
            return part
    return "shared"


def costs(junit_xml: str, studies: list[str]) -> dict[str, tuple[int, float]]:
    """{study or "shared": (tests, seconds)} from a JUnit file."""
    out: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        row = out[study_of(case.get("classname", ""), case.get("name", ""), studies)]
        row[0] += 1
        row[1] += float(case.get("time", 0) or 0)
    return {k: (n, s) for k, (n, s) in out.items()}


def table(by_study: dict[str, tuple[int, float]], studies: list[str]) -> str:
    lines = ["| study | tests | seconds (worker time) |", "|---|---|---|"]
    for name in [*studies, "shared"]:
        n, s = by_study.get(name, (0, 0.0))
        lines.append(f"| {name} | {n} | {s:,.0f} |")
    total_n = sum(n for n, _ in by_study.values())
    total_s = sum(s for _, s in by_study.values())
    lines.append(f"| all | {total_n} | {total_s:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    from storagebrief import studies
    names = list(studies.REGISTRY)
    if len(argv) != 1:
        print("usage: python tests/suite_costs.py JUNIT.xml", file=sys.stderr)
        return 2
    print(table(costs(argv[0], names), names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
