"""TensorFlow for a process started to train, infer or checkpoint: without Keras's optional integrations.

`import tensorflow` imports Keras 3, which imports four integrations it guards with an ImportError fallback:
scikit-learn (its estimator wrappers, which pull in SciPy's stats), matplotlib's pyplot (an image gallery),
IPython (notebook detection) and pandas (slicing data frames). No study's TensorFlow process uses them. Measured
here (TensorFlow 2.21, Keras 3.15, 2 cores; `import tensorflow; tf.keras.applications.ResNet50`, three runs each):
5.5-6.6 s of CPU as imported, 3.8-4.6 s with them held back; a study starts one such process per training job,
consumer or checkpoint job (issue 56: the suite starts dozens).

Held back only while TensorFlow is imported, and only if this process has not imported them already: a later
`import pandas` works as usual."""
from __future__ import annotations

import importlib.util
import os
import sys

OPTIONAL = ("sklearn", "matplotlib", "IPython", "pandas")


def tensorflow():
    """The `tensorflow` module, imported with the integrations in OPTIONAL held back (see the module docstring)."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    held = [name for name in OPTIONAL if name not in sys.modules]
    for name in held:
        sys.modules[name] = None          # `import name` raises ImportError: Keras takes its fallback
    try:
        import tensorflow as tf
    finally:
        for name in held:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return tf


def library_files() -> list[str]:
    """TensorFlow's and Keras's shared libraries and compiled modules, found without importing them: what importing
    TensorFlow reads (measured here: the import maps 918 MB of tensorflow/'s shared libraries, nearly all of them)."""
    out = []
    for package in ("tensorflow", "keras"):
        spec = importlib.util.find_spec(package)
        for top in (spec.submodule_search_locations or []) if spec else []:
            for folder, _dirs, files in os.walk(top):
                out += [os.path.join(folder, f) for f in files
                        if f.endswith((".so", ".pyc")) or ".so." in f]
    return out


def read_libraries() -> int:
    """Read library_files() once, so their pages are in the page cache (charged to this process's cgroup, not a
    job's); returns the bytes read. Reading them costs a fraction of importing TensorFlow to the same end: 0.3-0.5
    s of CPU with them cached already, 5.5-8.7 s for `import tensorflow; tf.keras.applications.ResNet50` (issue 56)."""
    buf, total = bytearray(1 << 20), 0
    for path in library_files():
        try:
            with open(path, "rb", buffering=0) as f:
                while n := f.readinto(buf):
                    total += n
        except OSError:
            continue
    return total


WARM_UP = "from storagebrief.kit.tf_import import read_libraries; read_libraries()"
