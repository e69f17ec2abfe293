"""Calibrate an emulated accelerator from a real one: a catalogue workload's training step, timed on this
machine's accelerator, becomes a compute time per batch (`storagebrief calibrate-accelerator`).

The framework is chosen the way a user would run the workload: TensorFlow when it sees a GPU; else PyTorch when
installed (on its GPU when CUDA is available, else on the CPU); else TensorFlow on the CPU. The device is in the
accelerator's name (h200-measured, cpu-measured) and in every entry, so a CPU figure is never taken for a GPU's.
Data are synthetic and already on the device (the step's compute only: what the emulated accelerator's sleep
stands for). The time per batch is the median over the timed steps, after warm-up steps (graph building,
autotuning); min and max are stored beside it. A smaller input than the workload's is labelled `reduced_input`.
"""
from __future__ import annotations

import platform
import re
import socket
import statistics
import time
from datetime import datetime, timezone

MODELS = {"resnet50": {"input": (224, 224, 3), "classes": 1000,
                       "what": "ResNet-50 training step (forward, backward, SGD update)"}}
FRAMEWORKS = ("auto", "tensorflow", "pytorch")


def check(workload: str, batch_size: int, steps: int, warmup: int, image_size: int | None, framework: str) -> None:
    """Bad input: one line naming the parameter, before any work."""
    if workload not in MODELS:
        raise ValueError(f"--workload '{workload}': no model to measure for it; allowed: {sorted(MODELS)}")
    for name, v, lo in (("--batch-size", batch_size, 1), ("--steps", steps, 2), ("--warmup", warmup, 0)):
        if v < lo:
            raise ValueError(f"{name} = {v}: must be at least {lo}")
    if image_size is not None and not 8 <= image_size <= 1024:
        raise ValueError(f"--image-size = {image_size}: must be between 8 and 1024 pixels")
    if framework not in FRAMEWORKS:
        raise ValueError(f"--framework '{framework}': allowed {', '.join(FRAMEWORKS)}")


def _tensorflow():
    try:
        from .tf_import import tensorflow     # without Keras's optional integrations (kit/tf_import.py)
        return tensorflow()
    except ImportError:
        return None


def _torch():
    try:
        import torch
        import torchvision  # noqa: F401
        return torch
    except ImportError:
        return None


def choose(framework: str) -> tuple[str, str]:
    """(framework, device kind): tensorflow|pytorch, gpu|cpu."""
    tf = _tensorflow() if framework in ("auto", "tensorflow") else None
    if framework == "tensorflow" and tf is None:
        raise ValueError("--framework tensorflow: tensorflow is not installed")
    if tf is not None:
        tf_gpu = bool(tf.config.list_physical_devices("GPU"))
        if tf_gpu or framework == "tensorflow":
            return "tensorflow", "gpu" if tf_gpu else "cpu"
    torch = _torch()
    if torch is not None:
        return "pytorch", "gpu" if torch.cuda.is_available() else "cpu"
    if framework == "pytorch":
        raise ValueError("--framework pytorch: torch and torchvision are not installed")
    if tf is None:      # a GPU machine with PyTorch only lacks TensorFlow; one with neither can measure nothing
        raise ValueError("--framework auto: neither TensorFlow nor PyTorch (with torchvision) is installed")
    return "tensorflow", "cpu"


def _time_steps(step, steps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        step()
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        out.append(time.perf_counter() - t)
    return out


def _tf(workload: str, batch: int, shape: tuple, steps: int, warmup: int) -> tuple[list[float], str, str]:
    from .tf_import import tensorflow
    tf = tensorflow()
    m = MODELS[workload]
    model = tf.keras.applications.ResNet50(weights=None, input_shape=shape, classes=m["classes"])
    opt = tf.keras.optimizers.SGD(0.01, momentum=0.9)
    opt.build(model.trainable_variables)    # slots made before the trace: one trace, not two (train_resnet50/worker.py)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    x = tf.random.uniform((batch, *shape))
    y = tf.random.uniform((batch,), maxval=m["classes"], dtype=tf.int32)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    times = _time_steps(lambda: float(train_step()), steps, warmup)     # float(): waits for the step's result
    gpus = tf.config.list_physical_devices("GPU")
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") if gpus else _cpu_name()
    return times, f"TensorFlow {tf.__version__}, float32", name


def _pt(workload: str, batch: int, shape: tuple, steps: int, warmup: int) -> tuple[list[float], str, str]:
    import torch
    import torchvision
    m = MODELS[workload]
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    model = torchvision.models.resnet50(num_classes=m["classes"]).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(batch, shape[2], shape[0], shape[1], device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, m["classes"], (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()     # the step's own end: its time, not its launch
    times = _time_steps(step, steps, warmup)
    name = torch.cuda.get_device_name(0) if cuda else _cpu_name()
    return times, f"PyTorch {torch.__version__}, " + ("bf16 autocast, channels_last" if cuda else "float32"), name


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def default_name(device: str, device_name: str) -> str:
    """h200-measured from 'NVIDIA H200', cpu-measured on a CPU."""
    if device == "cpu":
        return "cpu-measured"
    m = re.search(r"\b([A-Z]{1,3}\d{2,4}[A-Z]?)\b", device_name.upper())
    return f"{(m.group(1) if m else 'gpu').lower()}-measured"


def measure(workload: str, batch_size: int, steps: int = 10, warmup: int = 2, image_size: int | None = None,
            framework: str = "auto") -> dict:
    """Time the workload's training step here; the store entry (compute_s per batch and how it was measured)."""
    check(workload, batch_size, steps, warmup, image_size, framework)
    fw, device = choose(framework)
    full = MODELS[workload]["input"]
    shape = (image_size, image_size, full[2]) if image_size else full
    times, stack, device_name = (_tf if fw == "tensorflow" else _pt)(workload, batch_size, shape, steps, warmup)
    med = statistics.median(times)
    return {
        "compute_s": med, "batch_size": batch_size, "samples_per_s": batch_size / med,
        "step_s_min": min(times), "step_s_max": max(times), "steps_timed": steps, "warmup_steps": warmup,
        "device": device, "device_name": device_name, "framework": stack,
        "input_shape": list(shape), "reduced_input": list(shape) != list(full),
        "source": f"measured: {MODELS[workload]['what']}, {stack} on {device_name} ({device}), batch {batch_size}, "
                  f"input {'x'.join(map(str, shape))}, synthetic data on the device, median of {steps} steps after "
                  f"{warmup} warm-up",
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{socket.gethostname()} ({_cpu_name()}, {platform.system()} {platform.release()})",
    }
