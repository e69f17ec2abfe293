"""The framework sweep's TensorFlow job (a core.longjob.LongJob started by framework._job).

It joins its cgroup before anything else (longjob.BOOT), imports TensorFlow, builds a Keras transformer of
BERT's shape (random init, no download), traces its train step on a synthetic batch and reports
ready. Then it waits on stdin for one command per line: {"dir", "steps", "every", "max_to_keep"}
trains that many steps, saving with tf.train.CheckpointManager every `every` steps (kit.checkpoint:
a save counts when its files and folder are fsync'ed), and reports "done"; "quit" or EOF ends it.
One job per target serves every scenario of the sweep, so TensorFlow's start-up is paid once.
Events go to the parent as JSON lines on an inherited pipe. Kept light on imports.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ...kit import checkpoint
from ...kit.tf_import import tensorflow

BATCHES = 4            # distinct synthetic batches, cycled (the input is not what is measured)


def _emit(fd: int, **event) -> None:
    os.write(fd, (json.dumps(event) + "\n").encode())


def _encoder_block(keras, hidden: int, heads: int, ffn: int):
    """One post-norm transformer encoder layer as BERT has it: attention, add & norm, GELU FFN, add & norm."""
    layers = keras.layers

    class EncoderBlock(layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.attention = layers.MultiHeadAttention(heads, hidden // heads)
            self.attention_norm = layers.LayerNormalization(epsilon=1e-12)
            self.intermediate = layers.Dense(ffn, activation="gelu")
            self.output_dense = layers.Dense(hidden)
            self.output_norm = layers.LayerNormalization(epsilon=1e-12)

        def call(self, x):
            x = self.attention_norm(x + self.attention(x, x))
            return self.output_norm(x + self.output_dense(self.intermediate(x)))

    return EncoderBlock()


def build_bert(spec: dict, tf):
    """BERT's pre-training model: token + position + segment embeddings, `layers` encoder blocks, the
    masked-LM head (tied to the word embeddings, on `predictions` positions) and next-sentence head."""
    keras = tf.keras
    layers = keras.layers
    hidden, seq, vocab = spec["hidden"], spec["seq_len"], spec["vocab"]

    class Bert(keras.Model):
        def __init__(self):
            super().__init__()
            self.word = layers.Embedding(vocab, hidden)
            self.position = layers.Embedding(seq, hidden)
            self.segment = layers.Embedding(2, hidden)
            self.embedding_norm = layers.LayerNormalization(epsilon=1e-12)
            self.blocks = [_encoder_block(keras, hidden, spec["heads"], spec["ffn"]) for _ in range(spec["layers"])]
            self.transform = layers.Dense(hidden, activation="gelu")
            self.transform_norm = layers.LayerNormalization(epsilon=1e-12)
            self.pooler = layers.Dense(hidden, activation="tanh")
            self.next_sentence = layers.Dense(2)

        def build(self, _shape=None):
            self.mlm_bias = self.add_weight(shape=(vocab,), initializer="zeros", name="mlm_bias")

        def call(self, ids, segments, positions):
            x = self.word(ids) + self.position(tf.range(seq))[None] + self.segment(segments)
            x = self.embedding_norm(x)
            for block in self.blocks:
                x = block(x)
            picked = self.transform_norm(self.transform(tf.gather(x, positions, batch_dims=1)))
            logits = tf.matmul(picked, self.word.embeddings, transpose_b=True) + self.mlm_bias
            return logits, self.next_sentence(self.pooler(x[:, 0]))

    return Bert()


def _batches(spec: dict, tf) -> list:
    rng = np.random.default_rng(spec["seed"])
    b, seq, pred, vocab = spec["batch_size"], spec["seq_len"], spec["predictions"], spec["vocab"]
    out = []
    for _ in range(BATCHES):
        positions = np.sort(rng.choice(seq, size=(b, pred)), axis=1)
        out.append(tuple(tf.constant(a) for a in (
            rng.integers(0, vocab, (b, seq), dtype=np.int32), rng.integers(0, 2, (b, seq), dtype=np.int32),
            positions.astype(np.int32), rng.integers(0, vocab, (b, pred), dtype=np.int32),
            rng.integers(0, 2, (b,), dtype=np.int32))))
    return out


def _train_step(model, opt, tf):
    ce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(jit_compile=False)   # XLA is slower on this class of CPU (DESIGN.md)
    def step(ids, segments, positions, labels, next_label):
        with tf.GradientTape() as tape:
            logits, nsp = model(ids, segments, positions)
            loss = ce(labels, logits) + ce(next_label, nsp)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def _save(manager, folder: Path, step: int) -> checkpoint.Written:
    """TensorFlow's own writer, then every file it wrote and the folder fsync'ed (the save's clock)."""
    t = time.perf_counter()

    def write() -> list[Path]:
        prefix = Path(manager.save(checkpoint_number=step))
        return sorted(folder.glob(prefix.name + ".*")) + [folder / "checkpoint"]

    w = checkpoint.save(write)
    checkpoint.fsync_dir(folder)
    return checkpoint.Written(w.files, w.bytes, time.perf_counter() - t)


def _scenario(cmd: dict, model, opt, step_fn, batches, tf, fd: int) -> None:
    """One scenario: `steps` steps from a fresh CheckpointManager folder, a save every `every` steps."""
    folder = Path(cmd["dir"])
    folder.mkdir(parents=True, exist_ok=True)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=opt), str(folder),
                                         max_to_keep=cmd["max_to_keep"])
    tally = checkpoint.Tally()
    steps, every = cmd["steps"], cmd["every"]
    t0 = time.perf_counter()
    loss = 0.0
    for step in range(1, steps + 1):
        loss = float(step_fn(*batches[step % len(batches)]))
        if step % every == 0:
            w = tally.add(_save(manager, folder, step))
            _emit(fd, event="checkpoint", step=step, bytes=w.bytes, seconds=w.seconds, files=len(w.files))
    _emit(fd, event="done", seconds=time.perf_counter() - t0, steps=steps, checkpoints=tally.count,
          bytes=tally.bytes, checkpoint_s=tally.seconds, loss=loss,
          kept=len(manager.checkpoints), files_left=len(list(folder.iterdir())))


def worker_main(spec_path: str) -> None:
    """Entry point (already in its cgroup): build, trace, report ready, then serve scenarios."""
    spec = json.loads(Path(spec_path).read_text())
    fd = int(spec["event_fd"])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    t0 = time.perf_counter()
    tf = tensorflow()

    tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(max(2, spec["threads"]))
    tf.keras.utils.set_random_seed(spec["seed"])
    model = build_bert(spec, tf)
    opt = tf.keras.optimizers.AdamW(spec["learning_rate"], weight_decay=0.01)
    batches = _batches(spec, tf)
    model(*batches[0][:3])                  # the weights, then the optimizer's slots, made before the trace: a
    opt.build(model.trainable_variables)    # variable made while tracing makes tf.function trace the step twice
    step_fn = _train_step(model, opt, tf)
    step_fn(*batches[0])                    # the one trace
    parameters = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    _emit(fd, event="ready", startup_s=time.perf_counter() - t0, parameters=parameters)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("quit"):
            return
        _scenario(cmd, model, opt, step_fn, batches, tf, fd)
