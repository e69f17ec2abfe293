"""`storagebrief <study> [-S key=value ...] [--out DIR]`: the same functions the notebooks call."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import config

# study command -> (params section, module, default output dir)
STUDY_COMMANDS = {
    "preprocess": ("preprocess", "storagebrief.preprocess", "reports/preprocess"),
    "emulate": ("emulate", "storagebrief.emulate", "reports/emulate"),
    "train-resnet50": ("train_resnet50", "storagebrief.train_resnet50", "reports/train_resnet50"),
}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="storagebrief", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="what this machine allows and what each missing piece disables")
    for name, (section, _, out) in STUDY_COMMANDS.items():
        sp = sub.add_parser(name, help=f"run the {section} study")
        sp.add_argument("--params", default="params.yaml")
        sp.add_argument("-S", "--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a parameter, e.g. -S preprocess.repeats=3")
        sp.add_argument("--out", default=out, help=f"output directory (default {out})")
    bp = sub.add_parser("brief", help="render reports/brief.html and reports/brief.pdf")
    bp.add_argument("--params", default="params.yaml")
    bp.add_argument("--reports", default="reports")
    bp.add_argument("--no-pdf", action="store_true")
    vp = sub.add_parser("validate", help="check params.yaml (and overrides) without running anything")
    vp.add_argument("--params", default="params.yaml")
    vp.add_argument("-S", "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "doctor":
            from .inventory import doctor_lines
            print("\n".join(doctor_lines()))
            return 0
        if args.command == "validate":
            params = config.load(args.params, args.overrides)
            print(f"ok: {args.params} is valid (sections: {', '.join(params.sections) or 'none'})")
            return 0
        if args.command == "brief":
            from . import report
            out = report.render(args.reports, args.params, pdf=not args.no_pdf)
            print(f"wrote {out['html']}" + (f" and {out['pdf']}" if out["pdf"] else ""))
            return 0 if (out["pdf"] or args.no_pdf) else 1
        section, module, _ = STUDY_COMMANDS[args.command]
        params = config.load(args.params, args.overrides)
        params.section(section)
        import importlib
        mod = importlib.import_module(module)
        frame = mod.run_study(params, Path(args.out))
        print(f"wrote {len(frame)} runs to {Path(args.out) / 'runs.csv'}")
        return 0
    except (config.ParamsError, ValueError, FileNotFoundError) as exc:
        print(f"storagebrief: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
