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


WARM_UP = "from storagebrief.kit.tf_import import tensorflow; tensorflow().keras.applications.ResNet50"
