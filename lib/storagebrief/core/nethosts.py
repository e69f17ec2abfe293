"""Client hosts on this one machine, for multi-host runs and their tests: each host is a network
namespace with its own UTS namespace (its own hostname), an address on a private bridge that only
this machine routes, and an sshd from the system's openssh-server that accepts one key made for
the set. All hosts see this machine's filesystem at the same paths: MLPerf Storage's multi-client
setup (one shared filesystem mounted alike on every client).

Names carry the creating process's PID (netns `sbh-<pid>-<k>`, which is also the host's hostname;
bridge `sbb<pid>`; veth `sbv<pid>h<k>`), so `leftovers()` (called by core.leftovers on every run and
by `storagebrief doctor --clean`) removes a dead creator's hosts — their processes killed first —
after a kill -9, and never a live one's.

    with HostSet.up(2, folder) as hs:     # or up()/down() by hand: python -m storagebrief.core.nethosts
        hs.ssh(hs.hosts[0], "hostname")
        hs.hostfile(slots=2)             # an Open MPI hostfile of the hosts' addresses
        hs.mpi_env()                     # ssh agent + interfaces for mpirun

Needs root, `ip` (iproute2), `unshare` and `sshd`; `unavailable()` says why not, before any work.
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import procs

NETNS_PREFIX = "sbh"
BRIDGE_PREFIX = "sbb"
VETH_PREFIX = "sbv"
SUBNET_BASE = ipaddress.ip_network("10.213.0.0/16")   # a /24 of it per set; only this machine routes it
SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")                        # sshd refuses to start without it
START_TIMEOUT_S = 10.0


class HostsUnavailable(RuntimeError):
    """Hosts cannot be made here; the message says why."""


def unavailable() -> str | None:
    """Why hosts cannot be made on this machine, or None."""
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    for tool in ("ip", "unshare", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    if not Path(SSHD).exists():
        return f"{SSHD} is missing: install openssh-server (apt-get install openssh-server)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _netns_names() -> list[str]:
    out = _ip("-json", "netns", "list", check=False).stdout.strip()
    return [n["name"] for n in json.loads(out)] if out else []


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = json.loads(_ip("-json", "-4", "addr", "show").stdout or "[]")
    return [ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
            for link in out for a in link.get("addr_info", [])]


def _free_subnet(pid: int) -> ipaddress.IPv4Network:
    """A /24 of SUBNET_BASE no interface of this machine is on (the PID picks where to start)."""
    subnets = list(SUBNET_BASE.subnets(new_prefix=24))
    used = _used_networks()
    for i in range(len(subnets)):
        net = subnets[(pid + i) % len(subnets)]
        if not any(net.overlaps(u) for u in used):
            return net
    raise HostsUnavailable(f"every /24 of {SUBNET_BASE} is in use on this machine")


@dataclass(frozen=True)
class Host:
    name: str            # the netns name and the host's hostname
    address: str
    folder: Path         # its sshd's config, host key, pid file and log

    @property
    def pidfile(self) -> Path:
        return self.folder / "sshd.pid"


@dataclass
class HostSet:
    owner: int
    subnet: str
    bridge: str
    gateway: str                       # this machine's address on the bridge (the launcher's side)
    folder: Path
    hosts: list[Host] = field(default_factory=list)

    # -- using them ------------------------------------------------------------------------
    @property
    def key(self) -> Path:
        return self.folder / "id_ed25519"

    @property
    def ssh_config(self) -> Path:
        return self.folder / "ssh_config"

    def ssh_command(self) -> list[str]:
        return ["ssh", "-F", str(self.ssh_config)]

    def ssh(self, host: Host, command: str, timeout_s: float = 30.0, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*self.ssh_command(), host.address, command], capture_output=True, text=True,
                              timeout=timeout_s, check=check)

    def hostfile(self, slots: int = 1, path: Path | None = None) -> Path:
        """An Open MPI hostfile: one line per host, `<address> slots=<n>`."""
        path = path or self.folder / "hostfile"
        path.write_text("".join(f"{h.address} slots={slots}\n" for h in self.hosts))
        return path

    def mpi_env(self) -> dict[str, str]:
        """What mpirun needs to start ranks on these hosts: our ssh (key, config) as its agent, and its
        traffic kept on the bridge's subnet."""
        agent = " ".join(self.ssh_command())
        return {"OMPI_MCA_plm_rsh_agent": agent, "PRTE_MCA_plm_ssh_agent": agent,
                "OMPI_MCA_btl_tcp_if_include": self.subnet, "OMPI_MCA_oob_tcp_if_include": self.subnet}

    # -- making and removing them ------------------------------------------------------------
    @classmethod
    def up(cls, count: int, folder: Path) -> "HostSet":
        """`count` hosts, each with a running sshd that accepts this set's key; removed again (all
        of it) if any step fails."""
        why = unavailable()
        if why:
            raise HostsUnavailable(why)
        if not 1 <= count <= 50:
            raise ValueError(f"count {count!r}: 1 to 50 hosts")
        pid = os.getpid()
        net = _free_subnet(pid)
        addrs = list(net.hosts())
        hs = cls(pid, str(net), f"{BRIDGE_PREFIX}{pid}", str(addrs[0]), Path(folder))
        hs.folder.mkdir(parents=True, exist_ok=True)
        try:
            hs._bridge()
            _keygen(hs.key)
            for k in range(1, count + 1):
                hs.hosts.append(hs._host(k, str(addrs[k])))
            hs._write_ssh_config()
            for h in hs.hosts:
                hs._wait_for_ssh(h)
        except BaseException:
            hs.down()
            raise
        return hs

    def _bridge(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def _host(self, k: int, address: str) -> Host:
        name = f"{NETNS_PREFIX}-{self.owner}-{k}"
        h = Host(name, address, self.folder / name)
        h.folder.mkdir(exist_ok=True)
        outside, inside = f"{VETH_PREFIX}{self.owner}h{k}", f"{VETH_PREFIX}{self.owner}g{k}"
        _ip("netns", "add", name)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", name)
        _ip("link", "set", outside, "master", self.bridge, "up")
        _ip("-n", name, "link", "set", inside, "name", "eth0")
        _ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "link", "set", "eth0", "up")
        _keygen(h.folder / "host_key")
        (h.folder / "sshd_config").write_text(_sshd_config(h, self.key.with_suffix(".pub")))
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        # its own UTS namespace, so `hostname` there is the host's name; sshd daemonizes and its
        # sessions inherit both namespaces
        subprocess.run(["ip", "netns", "exec", name, "unshare", "--uts", "sh", "-c",
                        f'hostname "$1" && exec {SSHD} -f "$2" -E "$3"', "sh", name,
                        str(h.folder / "sshd_config"), str(h.folder / "sshd.log")],
                       check=True, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        return h

    def _write_ssh_config(self) -> None:
        self.ssh_config.write_text(
            "Host *\n"
            f"  IdentityFile {self.key}\n  User root\n  BatchMode yes\n  StrictHostKeyChecking no\n"
            "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n  ConnectTimeout 5\n")

    def _wait_for_ssh(self, h: Host) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            r = self.ssh(h, "hostname", timeout_s=START_TIMEOUT_S, check=False)
            if r.returncode == 0 and r.stdout.strip() == h.name:
                return
            if time.monotonic() > deadline:
                log = (h.folder / "sshd.log")
                raise HostsUnavailable(f"host {h.name} ({h.address}): ssh did not answer in {START_TIMEOUT_S:.0f} s: "
                                       f"{(r.stderr or r.stdout).strip()[-300:]}"
                                       + (f"; sshd log: {log.read_text()[-300:]}" if log.exists() else ""))
            time.sleep(0.1)

    def down(self) -> list[str]:
        """Every process in the hosts killed (sshd, its sessions, ranks), the namespaces, veths and
        bridge removed. Returns what it removed."""
        return _remove(self.owner)

    def __enter__(self) -> "HostSet":
        return self

    def __exit__(self, *exc) -> None:
        self.down()


KEY_COMMENT = "storagebrief-test-hosts"


def _keygen(path: Path) -> None:
    """A fresh key pair at `path`; one an earlier `up` left in this folder (its comment says so) is replaced
    (ssh-keygen would ask before overwriting and, with no terminal, refuse); anyone else's is refused."""
    pub = path.with_name(path.name + ".pub")
    if path.exists() or pub.exists():
        try:
            ours = KEY_COMMENT in pub.read_text()
        except OSError:
            ours = False
        if not ours:
            raise RuntimeError(f"{path} exists and is not a key storagebrief made (no '{KEY_COMMENT}' in {pub}); "
                               "choose another folder for the hosts")
        path.unlink(missing_ok=True)
        pub.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", KEY_COMMENT, "-f", str(path)],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)


def _sshd_config(h: Host, authorized: Path) -> str:
    return (f"ListenAddress {h.address}\nPort 22\nHostKey {h.folder / 'host_key'}\n"
            f"AuthorizedKeysFile {authorized}\nPidFile {h.pidfile}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "AcceptEnv *\nPermitUserEnvironment no\nX11Forwarding no\n")


def _kill_netns_processes(name: str) -> int:
    """SIGKILL every process inside netns `name`, until none is left (sshd forks sessions)."""
    killed = 0
    for _ in range(50):
        pids = [int(p) for p in _ip("netns", "pids", name, check=False).stdout.split()]
        if not pids:
            return killed
        killed += procs.kill_all(pids)
        time.sleep(0.05)
    return killed


def _remove(owner: int) -> list[str]:
    out = []
    for name in _netns_names():
        if name.startswith(f"{NETNS_PREFIX}-{owner}-"):
            killed = _kill_netns_processes(name)
            _ip("netns", "del", name, check=False)      # its veth end goes with it, and so the pair
            out.append(f"removed test host {name}" + (f" (killed {killed} process(es) in it)" if killed else ""))
    if _ip("link", "show", f"{BRIDGE_PREFIX}{owner}", check=False).returncode == 0:
        _ip("link", "del", f"{BRIDGE_PREFIX}{owner}", check=False)
        out.append(f"removed bridge {BRIDGE_PREFIX}{owner}")
    return out


def _owner(name: str, prefix: str) -> int | None:
    rest = name[len(prefix):].lstrip("-").split("-")[0]
    return int(rest) if name.startswith(prefix) and rest.isdigit() else None


def owners() -> set[int]:
    """The PIDs whose hosts exist now (netns or bridge)."""
    found = {_owner(n, NETNS_PREFIX) for n in _netns_names()}
    links = json.loads(_ip("-json", "link", "show", "type", "bridge", check=False).stdout or "[]")
    found |= {_owner(link["ifname"], BRIDGE_PREFIX) for link in links}
    return {p for p in found if p is not None}


def leftovers(alive) -> list[str]:
    """Remove the hosts of creators that are dead (`alive(pid)` False); nothing without root or ip."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return []
    out = []
    for pid in sorted(owners()):
        if not alive(pid):
            out += [f"{line} of dead process {pid}" for line in _remove(pid)]
    return out


def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)        # leaves the with-block: the hosts are removed


def _main(argv: list[str]) -> int:
    """python -m storagebrief.core.nethosts up K FOLDER   (prints the hosts, stays until Ctrl-C)"""
    if len(argv) != 3 or argv[0] != "up" or not argv[1].isdigit():
        print(_main.__doc__, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    try:
        return _serve(int(argv[1]), Path(argv[2]))
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        err = getattr(exc, "stderr", None)
        why = (err.decode(errors="replace") if isinstance(err, bytes) else err or "").strip().splitlines()
        print(f"storagebrief: error: hosts not made: {exc}" + (f": {why[-1]}" if why else ""), file=sys.stderr)
        return 2


def _serve(count: int, folder: Path) -> int:
    try:
        with HostSet.up(count, folder) as hs:
            for h in hs.hosts:
                print(f"{h.name} {h.address}")
            print(f"ssh: {' '.join(hs.ssh_command())} <address>\nhostfile: {hs.hostfile()}\n"
                  f"mpirun environment: {' '.join(f'{k}={v!r}' for k, v in hs.mpi_env().items())}\n"
                  "Ctrl-C removes them.", flush=True)
            signal.pause()
    except KeyboardInterrupt:       # whenever it comes: the with-block has removed the hosts
        pass
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
