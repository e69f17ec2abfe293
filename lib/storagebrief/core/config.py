"""params.yaml as validated pydantic models.

Every key is checked before any work starts: unknown keys, wrong types and
out-of-range values raise ParamsError naming the key, the value and what is
allowed. `-S key=value` overrides (same syntax as `dvc exp run -S`) are merged
before validation. `scale: paper` overlays params/paper.yaml, so paper scale is
one switch away without a second copy of every knob.
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from . import cache
from .paramsfile import (MAX_OVERRIDE_BYTES, MAX_PARAMS_BYTES, ParamsError, read_yaml, safe_yaml,  # noqa: F401
                         yaml_error_line)
from .params_input import _format_error, apply_override, deep_merge, parse_override
from .s3target import S3TargetParams, check_kind
from .targets import DEVICE_PROFILES, DeviceProfile, check_target_path, check_target_usable

# Study sections are registered by the studies registry (storagebrief.studies, imported by the
# package's __init__), so core never imports a study. A section's model loads lazily: its heavy
# imports (TensorFlow) are paid only by the study that runs.
_SECTIONS: dict[str, Callable[[], type]] = {}
_OBJECT_SECTIONS: set[str] = set()      # sections of studies that measure S3 targets (Study.object_targets)


def register_section(name: str, model: Callable[[], type], object_targets: bool = False) -> None:
    """A study's params section: `model()` returns its pydantic model (loaded on first use); object_targets:
    the study measures S3 targets, so validate checks what its run would refuse on them."""
    _SECTIONS[name] = model
    if object_targets:
        _OBJECT_SECTIONS.add(name)


def study_sections() -> tuple[str, ...]:
    """The registered study sections, in registry (brief) order."""
    return tuple(_SECTIONS)


def __getattr__(name: str):
    # STUDY_SECTIONS stays readable as a module constant, computed when asked.
    if name == "STUDY_SECTIONS":
        return study_sections()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PAPER_OVERLAY = "params/paper.yaml"


PROJECT_MARKERS = ("params.yaml", "dvc.yaml")


def project_root(start: str | Path | None = None) -> Path:
    """The storagebrief project holding `start` (default: the current directory): the nearest
    folder, walking up, with both params.yaml and dvc.yaml. JupyterLab starts a notebook's kernel
    in notebooks/, papermill and DVC at the root: both find the same project this way."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if all((folder / m).is_file() for m in PROJECT_MARKERS):
            return folder
    raise ParamsError(f"no storagebrief project above {here}: no folder holding both params.yaml and "
                      "dvc.yaml; start from the repository (or a folder inside it) or pass the params file")


def default_params_file(start: str | Path | None = None) -> Path:
    """params.yaml of the project around `start` (the current directory)."""
    return project_root(start) / "params.yaml"


def _resolve_project_path(value: str | None, info: ValidationInfo) -> str | None:
    # A relative path in params resolves against the params file's folder (DVC's own rule), so a
    # notebook whose kernel runs in notebooks/ and `dvc repro` at the root mean the same folder.
    root = (info.context or {}).get("root")
    if value is None or root is None:
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else Path(root) / path)


ProjectPath = Annotated[str, AfterValidator(_resolve_project_path)]


def sorted_counts(values: list[int], what: str, low: int = 1, high: int | None = None) -> list[int]:
    """Validate a sweep of whole-number counts; returns them sorted and de-duplicated."""
    bad = [v for v in values if not isinstance(v, int) or v < low or (high is not None and v > high)]
    if bad:
        allowed = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{what} must be whole numbers {allowed}, got {bad}")
    return sorted(set(values))


# Every user-given name that becomes part of a path (a target, a checkpoint shape, an emulate workload,
# a run id, a KV-cache model, an S3 prefix component, ...) matches this one pattern: letters, digits and
# `_ . + -`, starting with a letter or digit. No '/', no '..' alone, no leading '.', no absolute path, no
# whitespace, so `<folder>/<name>` always stays inside <folder>.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
NAME_MAX = 64
_NAME_RE = re.compile(NAME_PATTERN)


def check_name(value: Any, key: str, max_len: int = NAME_MAX) -> str:
    """`value` if it is a name that may become one component of a path; else ValueError naming `key`,
    the value and what is allowed (one line; inside a pydantic validator it becomes a ParamsError)."""
    if not isinstance(value, str) or len(value) > max_len or not _NAME_RE.match(value):
        raise ValueError(f"{key} = {value!r} is not allowed: a name used in file paths, 1..{max_len} letters, "
                         "digits, '_', '.', '+' or '-', starting with a letter or digit (no '/', no '..', not absolute)")
    return value


def check_names(values, key: str, max_len: int = NAME_MAX):
    """check_name on every key of a mapping (or item of a list); returns `values`."""
    for v in values:
        check_name(v, key, max_len)
    return values


Name = Annotated[str, AfterValidator(lambda v: check_name(v, "name"))]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OnSomeTargets(Strict):
    """A study section that may run on some of the targets: the engine (core.sweep.Sweep) narrows the sweep's
    targets to `targets` before the study's prepare; an unknown name is a ParamsError naming the allowed ones."""
    targets: list[str] = Field(default_factory=list)   # subset of target names; [] = every target


class TargetParams(Strict):
    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "name")
    path: ProjectPath
    profile: str | None = None  # a key of the device-profile catalogue (emulated device)
    description: str = ""
    kind: Literal["directory", "s3"] = "directory"   # s3: an object store (core.s3target), reached over S3
    s3: S3TargetParams | None = None

    @model_validator(mode="after")
    def _kind_matches(self):
        check_kind(self.name, self.kind, self.s3, self.profile)
        return self

    @field_validator("path")
    @classmethod
    def _safe_path(cls, value: str, info: ValidationInfo) -> str:
        root = (info.context or {}).get("root")
        if root is not None:
            _outside_project_outputs(value, Path(root))
        if (info.context or {}).get("check_targets", True):
            check_target_usable(value)   # system trees (also via symlinks), files, read-only, unwritable
        else:
            check_target_path(value)     # readers (the brief): no probe file, no folder needs to exist
        return value


# Folders of the project a target may not lie in: a study deletes and rewrites its folders on a target.
PROJECT_OWN = ("reports", ".git", ".dvc")


def _outside_project_outputs(value: str, root: Path) -> None:
    real = Path(os.path.realpath(value))
    for name in PROJECT_OWN:
        own = Path(os.path.realpath(root / name))
        if real == own or own in real.parents:
            raise ValueError(f"target path '{value}' lies inside the project's {name}/ ({own}): refused (studies "
                             "rewrite folders on a target; results and the repository are not storage to "
                             "measure); use data/targets/<name> or a folder outside the project")


class RunParams(Strict):
    cold_cache: bool | Literal["files"] = True   # true: drop_caches (root) else fadvise; files: fadvise only
    monitor_interval_s: float = Field(0.5, gt=0.01, le=60)
    on_busy_target: Literal["wait", "refuse"] = "wait"   # another run holds a target: queue or stop
    trace: bool = True                    # block events of each measured run (tracefs, root); else diskstats only
    trace_buffer_kib: int = Field(8192, ge=64, le=1 << 20)   # tracefs buffer per CPU (events not drained in time are lost)
    rerun_disturbed: int = Field(0, ge=0, le=5)   # re-runs of a point whose run other work disturbed (core/reruns.py;
                                                  # params.yaml: 1; 0 keeps a test's row count fixed on a busy machine)

    @field_validator("cold_cache", mode="before")
    @classmethod
    def _cold_cache_choice(cls, v):
        if v is True or v is False or v == "files":
            return v
        raise ValueError("allowed: true (drop_caches as root, else fadvise of the run's files), false, or files "
                         "(fadvise of the run's files only: leaves a shared machine's other caches alone)")


class Params(Strict):
    scale: Literal["quick", "paper"] = "quick"
    targets: list[TargetParams] = Field(min_length=1)
    profiles: dict[str, DeviceProfile] = Field(default_factory=dict)
    run: RunParams = RunParams()
    sections: dict[str, Any] = Field(default_factory=dict)  # validated study models
    source_hash: str = ""
    root: str = ""          # the params file's folder: relative paths and reports/ resolve against it

    def section(self, name: str):
        if name not in self.sections:
            raise ParamsError(f"params.yaml has no '{name}:' section; add one (see docs/adding-a-study.md).")
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
    return _SECTIONS[section]()


def validate(data: dict, root: Path | None = None, changes: dict | None = None,
             check_targets: bool = True, overrides: list[tuple[list[str], Any]] | None = None) -> Params:
    """Validate a params mapping (after overrides and overlays; `changes`, then `overrides` (parsed -S key=value)
    go over the overlay: what a user names on the command line wins over the paper profile).

    check_targets=False is for readers of results (the brief): target paths are checked as text only,
    nothing is written into them and a target folder that no longer exists is fine."""
    if not isinstance(data, dict):
        raise ParamsError("params must be a mapping of sections")
    if (why := cache.files_env_error()) is not None:
        raise ParamsError(why)
    data = copy.deepcopy(data)
    if data.get("scale") == "paper":
        overlay = (root or Path.cwd()) / PAPER_OVERLAY
        if not overlay.exists():
            raise ParamsError(f"scale=paper needs {overlay}; it is missing")
        data = deep_merge(data, safe_yaml(overlay.read_text(), str(overlay)) or {})
    if changes:
        data = deep_merge(data, changes)
    for keys, value in overrides or []:
        apply_override(data, keys, value)
    known = {"scale", "targets", "profiles", "run", *study_sections()}
    unknown = sorted(set(data) - known)
    if unknown:
        near = difflib.get_close_matches(str(unknown[0]), sorted(known), n=1, cutoff=0.6)
        raise ParamsError(
            f"unknown top-level key(s) {unknown}" + (f" (did you mean '{near[0]}'?)" if near else "")
            + f"; allowed: {', '.join(sorted(known))}"
        )
    context = {"root": Path(root).resolve() if root is not None else None, "check_targets": check_targets}
    sections = {}
    for name in study_sections():
        if name in data and data[name] is not None:
            try:
                model = _study_model(name)
            except (ImportError, AttributeError) as exc:
                raise ParamsError(f"section '{name}' is not available in this version: {exc}") from exc
            try:
                sections[name] = model.model_validate(data[name], context=context)
            except ValidationError as exc:
                raise ParamsError(_format_error(name, exc, model)) from None
    base = {k: data[k] for k in ("scale", "targets", "profiles", "run") if k in data}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]
    try:
        params = Params.model_validate({**base, "sections": sections, "source_hash": digest,
                                        "root": str(context["root"]) if context["root"] else ""},
                                       context=context)
    except ValidationError as exc:
        raise ParamsError(_format_error("", exc, Params)) from None
    names = [t.name for t in params.targets]
    if len(set(names)) != len(names):
        raise ParamsError(f"targets: names must be unique, got {names}")
    if check_targets:
        _check_object_sections(params)
    catalogue = params.profile_catalogue()
    for i, t in enumerate(params.targets):
        if t.profile is not None and t.profile not in catalogue:
            raise ParamsError(
                f"targets.{i}.profile = '{t.profile}': unknown device profile; "
                f"allowed: {sorted(catalogue)} (or define it under 'profiles:')"
            )
    return params


def check_section_targets(params: Params) -> None:
    """Every study section's `targets` names targets there are (`storagebrief validate`; a run checks its own
    section in the engine). Not part of loading: a notebook whose `targets` override leaves out a target another
    section names must still run its own study."""
    names = [t.name for t in params.targets]
    for name, section in params.sections.items():
        unknown = [t for t in section.targets if t not in names] if isinstance(section, OnSomeTargets) else []
        if unknown:
            raise ParamsError(f"{name}.targets = {section.targets}: unknown target name(s) {unknown}; allowed: "
                              f"{', '.join(names)}")


def s3_targets_of_sections(params: Params) -> dict[str, list[TargetParams]]:
    """For each section of a study that measures S3 targets, the S3 targets it would run on (none: left out)."""
    out = {}
    for name, section in params.sections.items():
        if name in _OBJECT_SECTIONS:
            chosen = set(section.targets) if isinstance(section, OnSomeTargets) and section.targets else None
            s3 = [t for t in params.targets if t.s3 is not None and (chosen is None or t.name in chosen)]
            if s3:
                out[name] = s3
    return out


def _check_object_sections(params: Params) -> None:
    """What a study's run refuses on the S3 targets it would measure, refused here first with the same line (the
    section's `check_s3_targets(names)`). Not for readers of results (check_targets off)."""
    for name, s3 in s3_targets_of_sections(params).items():
        hook = getattr(params.sections[name], "check_s3_targets", None)
        if hook is not None:
            hook([t.name for t in s3])





def load(path: str | Path | None = None, overrides: list[str] | str | None = None,
         changes: dict | None = None, check_targets: bool = True) -> Params:
    """Load params.yaml, apply `-S key=value` overrides, validate everything.

    path None: the project's params.yaml, found by walking up from the current directory.
    changes: sections merged over the file after the paper overlay (a notebook's knobs).
    Relative paths in params resolve against the params file's folder."""
    path = Path(path) if path is not None else default_params_file()
    data = read_yaml(path)
    if isinstance(overrides, str):      # one override given as a string, not a list of them
        overrides = [overrides]
    parsed = []
    for text in overrides or []:
        if not isinstance(text, str):
            raise ParamsError(f"override {text!r} is not a 'key=value' string")
        keys, value = parse_override(text)
        apply_override(data, keys, value)      # here too: `-S scale=paper` chooses the overlay
        parsed.append((keys, value))
    return validate(data, root=path.resolve().parent, changes=changes, check_targets=check_targets,
                    overrides=parsed)


def raw_params(params: Params) -> dict:
    """The validated params as plain data (for the brief's test-procedure appendix)."""
    out = params.model_dump(exclude={"sections", "source_hash", "root"})
    for name, model in params.sections.items():
        out[name] = model.model_dump()
    return out
