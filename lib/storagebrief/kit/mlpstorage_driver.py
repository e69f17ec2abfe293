"""Run by MLPerf's own interpreter (`make mlpstorage`: Python 3.12 with mlpstorage_py on its path), never imported
by storagebrief: `python mlpstorage_driver.py RESULTS_DIR OUT_JSON`.

It does what `mlpstorage reports reportgen --results-dir RESULTS_DIR` does once its arguments are parsed
(main.py: ReportGenerator(results_dir, args, logger).generate_reports()); at the pinned commit that command stops in
its argument parser before it gets there (docs/mlperf-tools.md). The generator prints its own report to stdout and
writes results.json / results.csv into RESULTS_DIR; this script then writes, as JSON, what the generator decided:
its directory validation, each run's category with MLPerf's issues, each workload's, and its processing errors.
Standard library and mlpstorage_py only.
"""
import json
import os
import sys


def main(results_dir: str, out_json: str) -> int:
    from mlpstorage_py.report_generator import ReportGenerator
    from mlpstorage_py.reporting import ResultsDirectoryValidator

    check = ResultsDirectoryValidator(results_dir).validate()
    gen = ReportGenerator(results_dir, None, use_colors=False)
    gen.generate_reports()

    def issues(items):
        return [{"category": i.validation.value.upper(), "text": str(i)} for i in items]

    runs = [{"run_id": str(rid), "folder": os.path.relpath(r.benchmark_run.result_dir, results_dir),
             "benchmark_type": r.benchmark_type.value if r.benchmark_type else None, "model": r.benchmark_model,
             "category": r.category.value.upper(), "issues": issues(r.issues)} for rid, r in gen.run_results.items()]
    workloads = [{"model": k[0], "accelerator": k[1], "category": w.category.value.upper(),
                  "runs": [str(b.run_id) for b in w.benchmark_run], "issues": issues(w.issues)}
                 for k, w in gen.workload_results.items()]
    out = {"directory": {"valid": check.is_valid, "found_runs": check.found_runs,
                         "errors": [e.message for e in check.errors], "warnings": list(check.warnings)},
           "runs": runs, "workloads": workloads, "processing_errors": list(gen.processing_errors)}
    with open(out_json, "w") as f:
        json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
