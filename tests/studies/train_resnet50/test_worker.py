"""The training job's own process: what it does between runs."""
from __future__ import annotations

import threading

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
