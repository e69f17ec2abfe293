"""python -m storagebrief.core.characterize TRACE [FORMAT]: a quick look at a trace's summary."""
import json
import sys

from .outputs import characterize, jsonable

if __name__ == "__main__":   # pragma: no cover - convenience for a quick look
    r, _, _ = characterize(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "tracefs")
    print(json.dumps(jsonable(r), indent=2))
