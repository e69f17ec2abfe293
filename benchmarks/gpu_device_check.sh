#!/usr/bin/env bash
# The one device check a session with a CUDA GPU runs (first run on an H200 on 2026-11-28: docs/performance-history.md).
# From the repository root, on the GPU machine, with the project's Python environment active (or PYTHON set):
#   bash benchmarks/gpu_device_check.sh [OUT_DIR]
# It prints (and writes to OUT_DIR, default $OUT or reports/gpu-check, a handful of small files: check.log, params.yaml,
# points.csv, runs.csv, accelerators.yaml; the 4 GiB test file and the sweep's folder stay in reports/gpu-check): the GPU facts and doctor's GPU line; the
# GPU tests; fio with libcufile built if CUDA's headers are there; the before/after sweep of issue 33's table
# (randread 4K/128K/1M x QD 1/8/32, idle) with every GPU path; ours ÷ fio per point; CPU cores per GB/s per path;
# and a calibrated accelerator (ResNet-50 compute time per batch on this GPU). Budget: about 10 minutes.
set -u
PY=${PYTHON:-python3}
OUT_DIR=${1:-${OUT:-reports/gpu-check}}
WORK=$PWD/reports/gpu-check
mkdir -p "$OUT_DIR" "$WORK/target"
export PYTHONPATH=$PWD/lib${PYTHONPATH:+:$PYTHONPATH}
log() { echo "== $*" | tee -a "$OUT_DIR/check.log"; }

log "machine"; { nvidia-smi; nproc; uname -r; } >>"$OUT_DIR/check.log" 2>&1
log "doctor's GPU line"; $PY -m storagebrief.cli doctor 2>&1 | grep '^GPU' | tee -a "$OUT_DIR/check.log"

log "fio with libcufile (built into .tools/bin when CUDA's headers and libcufile are present)"
if [ ! -x .tools/bin/fio ]; then
  cuda=$($PY -m storagebrief.studies.transfer_sweep.gpu_setup cuda-root) && src=$(ls -d .tools/src/fio-*/ 2>/dev/null | head -1) && [ -n "$src" ] && (
    lib=$cuda/lib; [ -d "$cuda/lib64" ] && lib=$cuda/lib64
    # configure's own link test needs the library folder too (LDFLAGS given to make alone failed it on the H200)
    cd "$src" && LDFLAGS="-L$lib -Wl,-rpath,$lib" ./configure --enable-libcufile --extra-cflags="-I$cuda/include" >/dev/null &&
    make -s -j"$(nproc)" fio >/dev/null && mkdir -p ../../bin && cp fio ../../bin/fio)
fi
[ -x .tools/bin/fio ] && .tools/bin/fio --enghelp | grep -q libcufile && log "libcufile fio: .tools/bin/fio" \
  || log "no libcufile fio (unpack fio's source into .tools/src/fio-<version>/ or run make gpu): fio reference skipped"

log "GPU engine tests (CPU stand-in; the same code path the GPU points use)"
timeout 300 $PY -m pytest -q tests/studies/transfer_sweep/test_gpu_engine.py 2>&1 | tail -3 | tee -a "$OUT_DIR/check.log"

log "the sweep: randread 4K/128K/1M x QD 1/8/32, idle, every GPU path (issue 33's before-table, after)"
cat >"$OUT_DIR/params.yaml" <<EOF
targets: [{name: local, path: $WORK/target}]
transfer_sweep:
  block_sizes: [4k, 128k, 1m]
  queue_depths: [1, 8, 32]
  loads: [idle]
  repeats: 1
  runtime_s: 3
  ramp_time_s: 0.5
  file_mib: 4096
  gpu: auto
EOF
timeout 420 $PY -m storagebrief.cli transfer-sweep --params "$OUT_DIR/params.yaml" --out "$WORK/sweep" --progress lines \
  2>&1 | tail -5 | tee -a "$OUT_DIR/check.log"
cp "$WORK/sweep/points.csv" "$WORK/sweep/runs.csv" "$OUT_DIR/" 2>/dev/null
$PY - "$WORK/sweep" <<'EOF' | tee -a "$OUT_DIR/check.log"
import sys, pandas as pd
p = pd.read_csv(f"{sys.argv[1]}/points.csv")
cols = [c for c in ("throughput_mb_per_s_mean", "lat_us_mean_mean", "clat_us_p99_merged", "cpu_cores_per_gb_per_s_mean",
                    "throughput_ratio_to_fio") if c in p]
print(p.pivot_table(index=["block_size_bytes", "queue_depth"], columns="path", values=cols[0]).round(0).to_string())
print(p[["path", "block_size_bytes", "queue_depth", *cols]].round(3).to_string(index=False))
r = pd.read_csv(f"{sys.argv[1]}/runs.csv")
gpu = r[r.path != "cpu"]
if "max_in_flight" in gpu:
    print(gpu[["path", "block_size_bytes", "queue_depth", "max_in_flight", "in_flight_mean", "kvikio_nthreads",
               "gpu_path_ran"]].to_string(index=False))
EOF

log "calibrate an accelerator from this GPU (ResNet-50, batch 256, PyTorch or TensorFlow)"
timeout 240 $PY -m storagebrief.cli calibrate-accelerator --workload resnet50 --batch-size 256 --steps 30 \
  --store "$OUT_DIR/accelerators.yaml" 2>&1 | tail -3 | tee -a "$OUT_DIR/check.log"
log "done: $OUT_DIR/check.log"
