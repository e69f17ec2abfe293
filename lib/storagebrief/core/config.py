"""params.yaml as validated pydantic models.

Every key is checked before any work starts: unknown keys, wrong types and
out-of-range values raise ParamsError naming the key, the value and what is
allowed. `-S key=value` overrides (same syntax as `dvc exp run -S`) are merged
before validation. `scale: paper` overlays params/paper.yaml, so paper scale is
one switch away without a second copy of every knob.
"""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ..studies import REGISTRY
from .targets import DEVICE_PROFILES, DeviceProfile, check_target_path, check_target_usable

# Study sections come from the registry; a study's params model loads lazily, so its
# heavy imports (TensorFlow) are paid only by the study that runs.
STUDY_SECTIONS: tuple[str, ...] = tuple(REGISTRY)
PAPER_OVERLAY = "params/paper.yaml"


class ParamsError(ValueError):
    """A parameter is wrong; the message names key, value and what is allowed."""


def sorted_counts(values: list[int], what: str, low: int = 1, high: int | None = None) -> list[int]:
    """Validate a sweep of whole-number counts; returns them sorted and de-duplicated."""
    bad = [v for v in values if not isinstance(v, int) or v < low or (high is not None and v > high)]
    if bad:
        allowed = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{what} must be whole numbers {allowed}, got {bad}")
    return sorted(set(values))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TargetParams(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    path: str
    profile: str | None = None  # a key of the device-profile catalogue (emulated device)
    description: str = ""

    @field_validator("path")
    @classmethod
    def _safe_path(cls, value: str, info: ValidationInfo) -> str:
        if (info.context or {}).get("check_targets", True):
            check_target_usable(value)   # system trees (also via symlinks), files, read-only, unwritable
        else:
            check_target_path(value)     # readers (the brief): no probe file, no folder needs to exist
        return value


class RunParams(Strict):
    cold_cache: bool = True
    monitor_interval_s: float = Field(0.5, gt=0.01, le=60)
    on_busy_target: Literal["wait", "refuse"] = "wait"   # another run holds a target: queue or stop
    trace: bool = True                    # block events of each measured run (tracefs, root); else diskstats only
    trace_buffer_kib: int = Field(8192, ge=64, le=1 << 20)   # tracefs buffer per CPU (events not drained in time are lost)


class Params(Strict):
    scale: Literal["quick", "paper"] = "quick"
    targets: list[TargetParams] = Field(min_length=1)
    profiles: dict[str, DeviceProfile] = Field(default_factory=dict)
    run: RunParams = RunParams()
    sections: dict[str, Any] = Field(default_factory=dict)  # validated study models
    source_hash: str = ""

    def section(self, name: str):
        if name not in self.sections:
            raise ParamsError(f"params.yaml has no '{name}:' section; add one (see README).")
        return self.sections[name]

    def profile_catalogue(self) -> dict[str, DeviceProfile]:
        return {**DEVICE_PROFILES, **self.profiles}

    def target(self, name: str) -> TargetParams:
        for t in self.targets:
            if t.name == name:
                return t
        raise ParamsError(
            f"unknown target '{name}'; allowed: {', '.join(t.name for t in self.targets)}"
        )


def _study_model(section: str):
    return REGISTRY[section].params_model()


def parse_override(text: str) -> tuple[list[str], Any]:
    """'preprocess.processes=[1,2]' -> (['preprocess', 'processes'], [1, 2])."""
    if "=" not in text:
        raise ParamsError(f"override '{text}' is not key=value (e.g. preprocess.repeats=3)")
    key, raw = text.split("=", 1)
    keys = [k for k in key.strip().split(".") if k]
    if not keys:
        raise ParamsError(f"override '{text}' has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ParamsError(f"override '{text}': value is not valid YAML ({exc})") from exc
    return keys, value


def apply_override(data: dict, keys: list[str], value: Any) -> None:
    node = data
    for k in keys[:-1]:
        if k.isdigit() and isinstance(node, list):
            node = node[int(k)]
            continue
        node = node.setdefault(k, {})
        if not isinstance(node, (dict, list)):
            raise ParamsError(f"override key '{'.'.join(keys)}': '{k}' is not a section")
    last = keys[-1]
    if isinstance(node, list) and last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value


def deep_merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _format_error(section: str, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in (section, *err["loc"]) if p != "")
        value = err.get("input")
        shown = json.dumps(value, default=str) if not isinstance(value, dict) else "{...}"
        lines.append(f"  {loc} = {shown}: {err['msg']}")
    return "invalid parameters:\n" + "\n".join(lines)


def validate(data: dict, root: Path | None = None, check_targets: bool = True) -> Params:
    """Validate a params mapping (after overrides and overlays).

    check_targets=False is for readers of results (the brief): target paths are checked as text only,
    nothing is written into them and a target folder that no longer exists is fine."""
    if not isinstance(data, dict):
        raise ParamsError("params must be a mapping of sections")
    data = copy.deepcopy(data)
    if data.get("scale") == "paper":
        overlay = (root or Path.cwd()) / PAPER_OVERLAY
        if not overlay.exists():
            raise ParamsError(f"scale=paper needs {overlay}; it is missing")
        data = deep_merge(data, yaml.safe_load(overlay.read_text()) or {})
    known = {"scale", "targets", "profiles", "run", *STUDY_SECTIONS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ParamsError(
            f"unknown top-level key(s) {unknown}; allowed: {sorted(known)}"
        )
    sections = {}
    for name in STUDY_SECTIONS:
        if name in data and data[name] is not None:
            try:
                model = _study_model(name)
            except (ImportError, AttributeError) as exc:
                raise ParamsError(f"section '{name}' is not available in this version: {exc}") from exc
            try:
                sections[name] = model.model_validate(data[name])
            except ValidationError as exc:
                raise ParamsError(_format_error(name, exc)) from None
    base = {k: data[k] for k in ("scale", "targets", "profiles", "run") if k in data}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]
    try:
        params = Params.model_validate({**base, "sections": sections, "source_hash": digest},
                                       context={"check_targets": check_targets})
    except ValidationError as exc:
        raise ParamsError(_format_error("", exc)) from None
    names = [t.name for t in params.targets]
    if len(set(names)) != len(names):
        raise ParamsError(f"targets: names must be unique, got {names}")
    catalogue = params.profile_catalogue()
    for i, t in enumerate(params.targets):
        if t.profile is not None and t.profile not in catalogue:
            raise ParamsError(
                f"targets.{i}.profile = '{t.profile}': unknown device profile; "
                f"allowed: {sorted(catalogue)} (or define it under 'profiles:')"
            )
    return params


def load(path: str | Path = "params.yaml", overrides: list[str] | None = None, check_targets: bool = True) -> Params:
    """Load params.yaml, apply `-S key=value` overrides, validate everything (check_targets: see validate)."""
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"params file '{path}' does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path} is not valid YAML: {exc}") from exc
    for text in overrides or []:
        keys, value = parse_override(text)
        apply_override(data, keys, value)
    return validate(data, root=path.resolve().parent, check_targets=check_targets)


def project_root(start: str | Path | None = None) -> Path:
    """The first folder holding both params.yaml and dvc.yaml, from `start` (default: the current
    directory) upwards, so commands work from any subfolder of the project (e.g. notebooks/)."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "params.yaml").is_file() and (folder / "dvc.yaml").is_file():
            return folder
    raise ParamsError(f"no storagebrief project (a folder with params.yaml and dvc.yaml) at or above {here}; "
                      "run from inside the project or pass --params")


def raw_params(params: Params) -> dict:
    """The validated params as plain data (for the brief's test-procedure appendix)."""
    out = params.model_dump(exclude={"sections", "source_hash"})
    for name, model in params.sections.items():
        out[name] = model.model_dump()
    return out
