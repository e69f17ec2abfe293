"""What this machine must have and allow for a study's settings, checked by `storagebrief validate` (every
section) and when a study's run starts (its own section), before anything is made. Not part of loading params:
a section beyond this machine (paper-scale KV caches on 24 GiB) must not stop another study's run, and a reader
of results (the brief) has nothing to check."""
from __future__ import annotations

from .config import Params, ParamsError, s3_targets_of_sections


def check_machine(params: Params, names: list[str] | None = None) -> None:
    """Each section's `check_machine()`: its processes, files and memory against this machine's limits
    (kit.budget); a refusal is its one line (ParamsError, exit 2)."""
    for name in params.sections if names is None else names:
        hook = getattr(params.sections.get(name), "check_machine", None)
        if hook is not None:
            try:
                hook()
            except ValueError as exc:
                raise ParamsError(str(exc)) from None


def check_tools(params: Params) -> None:
    """versitygw for the local-gateway S3 targets the sections would measure: else the line the gateway's start
    gives, naming the targets. A study that measures no S3 target never needs it."""
    from .s3gateway import GatewaySetupError, binary
    local = sorted({t.name for s3 in s3_targets_of_sections(params).values() for t in s3 if not t.s3.external})
    if not local:
        return
    try:
        binary()
    except GatewaySetupError as exc:
        raise ParamsError(f"S3 target(s) {', '.join(local)} (local gateway): {exc}") from None
