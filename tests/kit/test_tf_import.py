"""kit/tf_import: TensorFlow without Keras's optional integrations in the processes a study starts to train, infer or
checkpoint (issue 56: about 2 s of CPU less per process here)."""
from __future__ import annotations

import json
import mmap
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from storagebrief.kit import tf_import

LIB = Path(tf_import.__file__).resolve().parents[2]
# every module whose process is started to run TensorFlow (a job, a consumer, a pool worker, the prefill)
WORKER_MODULES = ("studies/train_resnet50/worker.py", "studies/checkpoint/framework_worker.py",
                  "studies/stream_inference/consumer.py", "studies/kv_cache/prefill.py",
                  "studies/preprocess/pipeline.py", "studies/preprocess/run.py")


def _in_a_fresh_process(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(LIB), "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_tensorflow_comes_without_the_integrations_and_they_import_after():
    got = _in_a_fresh_process(
        "import sys, json\n"
        "from storagebrief.kit.tf_import import tensorflow, OPTIONAL\n"
        "tf = tensorflow()\n"
        "loaded = [n for n in OPTIONAL if sys.modules.get(n) is not None]\n"
        "held = [n for n in OPTIONAL if n in sys.modules]\n"
        "import pandas\n"
        "print(json.dumps({'name': tf.__name__, 'step': int(tf.add(1, 2)), 'loaded': loaded, 'left_held': held,"
        " 'pandas_after': pandas.__name__, 'same': tensorflow() is tf}))")
    assert got == {"name": "tensorflow", "step": 3, "loaded": [], "left_held": [], "pandas_after": "pandas",
                   "same": True}


@pytest.mark.slow
def test_an_integration_imported_before_is_kept():
    got = _in_a_fresh_process(
        "import sys, json, pandas\n"
        "from storagebrief.kit.tf_import import tensorflow\n"
        "tensorflow()\n"
        "from keras.src.trainers.data_adapters import array_slicing\n"
        "print(json.dumps({'keras_sees_pandas': array_slicing.pandas is pandas}))")
    assert got == {"keras_sees_pandas": True}


def test_every_tensorflow_worker_imports_it_through_the_helper():
    for rel in WORKER_MODULES:
        text = (LIB / "storagebrief" / rel).read_text()
        assert not re.search(r"^\s*import tensorflow", text, re.M) and "tensorflow()" in text, rel


def test_the_training_warm_up_reads_the_libraries_without_importing_tensorflow(tmp_path):
    """warm_libraries' process (tf_import.WARM_UP) reads every shared library and compiled module of TensorFlow and
    Keras into the page cache, and imports neither (that cost 4.6-8.7 s of CPU per training study)."""
    from storagebrief.core import cache
    files = tf_import.library_files()
    big = [f for f in files if "/tensorflow/" in f and ".so" in Path(f).name and os.path.getsize(f) > 50 << 20]
    assert big, "no TensorFlow shared library found"
    got = _in_a_fresh_process(
        "import sys, json\n"
        f"{tf_import.WARM_UP}\n"
        "print(json.dumps({'imported': sorted(n for n in ('tensorflow', 'keras') if n in sys.modules)}))")
    assert got == {"imported": []}
    # what it read is in the page cache now, whole (the byte count moves while other processes write .pyc files);
    # the kernel may reclaim a few pages meanwhile under the tests beside it (16 of 192,404 seen in make test-fast)
    pages = {f: -(-os.path.getsize(f) // mmap.PAGESIZE) for f in big}
    cached = {f: cache.cached_pages(f) for f in big}
    assert all(pages[f] >= cached[f] >= 0.999 * pages[f] for f in big), (cached, pages)
    assert tf_import.read_libraries() >= 0.99 * sum(os.path.getsize(f) for f in files)
