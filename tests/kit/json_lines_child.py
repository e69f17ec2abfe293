"""The child tests/kit/test_child.py starts through kit.child: what it does is its JSON argument's "mode".

echo: ready (with its pid), then echoes every command until {"cmd": "exit"}; die: a word on stderr, exit 3 before
ready; silent: never answers; deaf: ready (with a grandchild's pid), then ignores exit, EOF and SIGTERM;
error: ready, then an error event for every command."""
import json
import os
import signal
import subprocess
import sys
import time


def say(obj) -> None:
    print(json.dumps(obj), flush=True)


def main() -> None:
    mode = json.loads(sys.argv[1])["mode"]
    if mode == "die":
        print("json_lines_child: dying before ready on purpose", file=sys.stderr, flush=True)
        raise SystemExit(3)
    if mode == "silent":
        time.sleep(600)
    if mode == "deaf":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        grandchild = subprocess.Popen(["sleep", "600"])
        say({"event": "ready", "pid": os.getpid(), "grandchild": grandchild.pid})
        time.sleep(600)
    say({"event": "ready", "pid": os.getpid()})
    print("not an event: a library's chatter on stdout", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line) if line.startswith("{") else line.strip()
        if cmd == {"cmd": "exit"}:
            return
        say({"event": "error", "error": f"no such command {cmd!r}"} if mode == "error" else
            {"event": "echo", "got": cmd})


if __name__ == "__main__":
    main()
