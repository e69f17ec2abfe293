"""The training job's own process: what it does between runs."""
from __future__ import annotations

import collections
import os
import threading

import numpy as np
import pytest

from storagebrief.studies.train_resnet50 import worker


def test_a_kept_job_does_not_wait_out_the_last_iterators_end():
    """worker._end_iterator: the last run's iterator ends in the background (tf.data's autotune thread
    made its destructor wait 7-9 s); the reference is dropped all the same."""
    ended, release = threading.Event(), threading.Event()

    class SlowToEnd:
        def __del__(self):
            release.wait(30)
            ended.set()

    last = [SlowToEnd()]
    worker._end_iterator(last)           # returns after ITERATOR_FREE_S, the destructor still waiting
    assert not ended.is_set() and last == []
    release.set()
    assert ended.wait(10)


@pytest.mark.parametrize("records, classes, batch", [(64, 4, 16), (65, 4, 16), (1000, 4, 32), (30, 2, 8)])
def test_class_balanced_batches_hold_each_class_equally_and_every_full_batch_of_an_epoch(records, classes, batch):
    """Each batch holds batch / classes records of every class; an epoch of a set with equal classes
    (label i % classes, in any order) gives records // batch batches, each record at most once."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    labels = np.arange(records) % classes
    np.random.default_rng(0).shuffle(labels)
    ds = tf.data.Dataset.from_tensor_slices((tf.reshape(tf.range(records), [records, 1]),
                                             tf.constant(labels, tf.int64), tf.ones([records], tf.int64)))
    batches = list(worker.class_balanced_batches(ds, batch, classes, tf).as_numpy_iterator())
    assert len(batches) == records // batch
    assert all(collections.Counter(y.tolist()) == {c: batch // classes for c in range(classes)}
               for _, y, _ in batches)
    ids = [int(i) for x, _, _ in batches for i in x.ravel()]
    assert len(ids) == len(set(ids)) and all(labels[i] == y for x, ys, _ in batches for i, y in zip(x.ravel(), ys))


@pytest.mark.slow     # builds ResNet50 and traces its step: ~10 s of CPU
def test_the_train_step_is_traced_once_with_the_optimizers_slots_made_before_it():
    """A variable made while tf.function traces makes it trace again: the momentum slots, made by the first step's
    apply_gradients, once doubled every training job's start-up (14-16 s of CPU for the first step, 7-8 s after)."""
    from storagebrief.kit.tf_import import tensorflow
    tf = tensorflow()
    model, opt, train_step = worker._model({"input_size": 32, "num_classes": 4, "learning_rate": 0.001}, tf)
    slots = len(opt.variables)
    assert slots > len(model.trainable_variables)           # momentum per weight, made before any step
    x = tf.zeros((2, 32, 32, 3))
    train_step(x, tf.constant([0, 1], tf.int64))
    assert len(opt.variables) == slots
    assert train_step.experimental_get_tracing_count() == 1
