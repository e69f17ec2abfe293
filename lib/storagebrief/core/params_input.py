"""What a user typed, read: `-S key=value` overrides parsed and applied, a params file merged over another, and a
validation error said in one line naming the key, the value and what is allowed (a near key suggested).
core.config validates with these; core.workloads explains its own model's errors with explain_error.
"""
from __future__ import annotations

import copy
import difflib
import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from .paramsfile import MAX_OVERRIDE_BYTES, ParamsError, safe_yaml
from .s3target import redact_url


def parse_override(text: str) -> tuple[list[str], Any]:
    """'preprocess.processes=[1,2]' -> (['preprocess', 'processes'], [1, 2])."""
    if "=" not in text:
        raise ParamsError(f"override '{text}' is not key=value (e.g. preprocess.repeats=3)")
    key, raw = text.split("=", 1)
    keys = [k for k in key.strip().split(".") if k]
    if not keys:
        raise ParamsError(f"override '{text}' has an empty key")
    value = safe_yaml(raw, f"override '{text[:80]}'", MAX_OVERRIDE_BYTES) if raw.strip() else None
    return keys, value


def apply_override(data: dict, keys: list[str], value: Any) -> None:
    """Set data[k1][k2]... = value; list items by index (targets.0.path). Errors name the key."""
    dotted = ".".join(keys)
    node: Any = data
    for depth, k in enumerate(keys):
        last = depth == len(keys) - 1
        where = ".".join(keys[:depth]) or "params"
        if isinstance(node, list):
            if not k.isdigit() or int(k) >= len(node):
                rest = ".".join(keys[depth + 1:] if k.isdigit() else keys[depth:])
                raise ParamsError(f"override key '{dotted}': {where} is a list of {len(node)} item(s); "
                                  f"give an index 0..{len(node) - 1} (e.g. {where}.0{'.' + rest if rest else ''})")
            if last:
                node[int(k)] = value
            else:
                node = node[int(k)]
        elif isinstance(node, dict):
            if last:
                node[k] = value
            else:
                node = node.setdefault(k, {})
                if not isinstance(node, (dict, list)):
                    raise ParamsError(f"override key '{dotted}': '{k}' is not a section")
        else:
            raise ParamsError(f"override key '{dotted}': '{keys[depth - 1]}' is not a section")


def deep_merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _model_at(model, loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that holds the last key of `loc` (nested models, lists, dicts of models)."""
    import typing

    def models_in(annotation):
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for arg in typing.get_args(annotation) for m in models_in(arg)]

    for key in loc[:-1]:
        if model is None:
            return None
        if isinstance(key, int) or key not in model.model_fields:
            continue          # a list index or a dict key: stay on the element's model
        found = models_in(model.model_fields[key].annotation)
        model = found[0] if found else None
    return model


def explain_error(model, err: dict) -> str:
    """pydantic's message, made to say what is allowed."""
    msg = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    kind, value, loc = err.get("type"), err.get("input"), tuple(err["loc"])
    if kind == "extra_forbidden":
        holder = _model_at(model, loc)
        allowed = sorted(holder.model_fields) if holder is not None else []
        near = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        msg = "unknown key" + (f" (did you mean '{near[0]}'?)" if near else "") + \
              (f"; allowed: {', '.join(allowed)}" if allowed else "")
    elif kind == "list_type" and isinstance(value, str):
        msg += " (write a list, e.g. [1, 2], not a string)"
    elif kind == "list_type" and isinstance(value, (int, float)) and not isinstance(value, bool):
        msg += f" (write a list, e.g. [{value!r}], not a number)"
    return msg


def _format_error(section: str, exc: ValidationError, model=None) -> str:
    lines = []
    for err in exc.errors():
        loc, value, msg = ".".join(str(p) for p in (section, *err["loc"]) if p != ""), err.get("input"), \
            explain_error(model, err)
        named = re.match(r"([a-z_]+)(\.\S+)?: ", msg) if not err["loc"] and isinstance(value, dict) else None
        if named and named.group(1) in value:      # a section-wide check naming its key: the line names that key
            loc, msg, value = f"{loc}.{named.group(0)[:-2]}", msg[named.end():], value[named.group(1)]
        shown = redact_url(json.dumps(value, default=str)) if not isinstance(value, dict) else "{...}"
        dotted = named is not None and named.group(2) and named.group(1) in err.get("input")
        lines.append(f"{loc}: {msg}" if err.get("type") == "extra_forbidden" or dotted else f"{loc} = {shown}: {msg}")
    if len(lines) == 1:
        return "invalid parameter " + lines[0]
    return "invalid parameters:\n" + "\n".join(f"  {line}" for line in lines)
