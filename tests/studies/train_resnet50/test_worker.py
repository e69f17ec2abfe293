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
