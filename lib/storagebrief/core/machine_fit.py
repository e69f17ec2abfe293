"""What this machine must have and allow for a study's settings, checked by `storagebrief validate` (every
section) and when a study's run starts (its own section), before anything is made. Not part of loading params:
a section beyond this machine (paper-scale KV caches on 24 GiB) must not stop another study's run, and a reader
of results (the brief) has nothing to check."""
from __future__ import annotations

from .config import Params, ParamsError, s3_targets_of_sections


def check_machine(params: Params, names: list[str] | None = None) -> None:
    """Each section's `check_machine()`: its processes, files and memory against this machine's limits
    (kit.budget); a refusal is its one line (ParamsError, exit 2).
    A section whose hook takes `s3` is told whether it would measure an S3 target (its processes then run the
    compiled S3 client beside them: kit.budget.s3_client_bytes)."""
    s3 = s3_targets_of_sections(params)
    _section_hooks(params, params.sections if names is None else names, "check_machine",
                   lambda name: {"s3": bool(s3.get(name))})


def _section_hooks(params: Params, names, hook_name: str, kwargs=None) -> None:
    """Each named section's `hook_name()` where its model has one (with `kwargs(name)` where its signature takes
    them); a ValueError is its one line (ParamsError)."""
    import inspect
    for name in names:
        hook = getattr(params.sections.get(name), hook_name, None)
        if hook is not None:
            known = inspect.signature(hook).parameters
            extra = {k: v for k, v in (kwargs(name) if kwargs else {}).items() if k in known}
            try:
                hook(**extra)
            except ValueError as exc:
                raise ParamsError(str(exc)) from None


def check_tools(params: Params, names: list[str] | None = None) -> None:
    """Every tool the sections' runs need, before anything is made (a run's start checks its own section; issue
    48: a notebook stopped on a missing gateway after it had written objects): versitygw for the local-gateway S3
    targets they would measure (else the line the gateway's start gives, naming the targets), then each section's
    own `check_tools()` (the streaming study's Kafka jars and Java). A study that measures no S3 target never
    needs versitygw."""
    from .s3gateway import GatewaySetupError, binary
    wanted = set(params.sections if names is None else names)
    local = sorted({t.name for name, s3 in s3_targets_of_sections(params).items() if name in wanted
                    for t in s3 if not t.s3.external})
    if local:
        try:
            binary()
        except GatewaySetupError as exc:
            raise ParamsError(f"S3 target(s) {', '.join(local)} (local gateway): {exc}") from None
    _section_hooks(params, sorted(wanted), "check_tools")
