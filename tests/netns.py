"""Network namespaces for real-topology fault tests (root only).

`NetnsLab(["coordinator", "client0", ...])` gives every role its own namespace and address in
10.201.0.0/24. With a bridge (the default when the kernel has one) every role has one veth whose
other end is a port of a bridge in a dedicated switch namespace; without, the first role is the
hub and holds one point-to-point /30 per other role. `cut(role)` sets the veth end outside the
role's namespace down (a pulled cable), `restore(role)` sets it up again.

Nothing touches the root namespace: links are created inside our namespaces, processes run with
`ip netns exec`, and traffic only goes to our own addresses. Names carry the test process's pid;
`close()` (also on errors, via the context manager) kills every process in our namespaces and
deletes them, and `sweep_stale()` removes what a killed test run of ours left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

PREFIX = "vflnt"  # every namespace of ours: vflnt<pid>-<lab>-<role>
SUBNET = "10.201.0"
IFACE = "eth0"  # the role's end of its link, inside its namespace
_PR_SET_PDEATHSIG = 1


class NetnsError(RuntimeError):
    """An `ip` command failed."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")
    return result


def namespaces() -> list[str]:
    """Names of all named network namespaces (`ip netns list` prints "name (id: N)")."""
    out = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


@dataclass(frozen=True)
class Support:
    reason: str | None  # why namespaces cannot be used; None if they can
    bridge: bool


def probe(tag: str | None = None) -> Support:
    """Can we create namespaces, veth pairs and (optionally) bridges? Leaves nothing behind."""
    if os.geteuid() != 0:
        return Support("needs root for `ip netns`", bridge=False)
    name = f"{tag or f'{PREFIX}{os.getpid()}'}-probe"
    try:
        ip("netns", "add", name)
    except (NetnsError, OSError, subprocess.SubprocessError) as exc:
        return Support(f"`ip netns add` failed: {exc}", bridge=False)
    try:
        veth = ip(
            "-n", name, "link", "add", "vp0", "type", "veth", "peer", "name", "vp1", check=False
        )
        if veth.returncode != 0:
            return Support(f"no veth pairs: {veth.stderr.strip()}", bridge=False)
        bridge = ip("-n", name, "link", "add", "brp", "type", "bridge", check=False)
        return Support(None, bridge=bridge.returncode == 0)
    finally:
        ip("netns", "del", name, check=False)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies (survives `ip`'s exec)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_pid(ns: str) -> int | None:
    head = ns.removeprefix(PREFIX).split("-", 1)[0]
    return int(head) if ns.startswith(PREFIX) and head.isdigit() else None


def _kill_namespace(ns: str) -> None:
    """SIGKILL every process still inside `ns` (only our test processes live there)."""
    for pid in ip("netns", "pids", ns, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def sweep_stale() -> list[str]:
    """Delete namespaces left by runs of ours whose test process is gone; returns their names."""
    stale = [
        ns
        for ns in namespaces()
        if (owner := _owner_pid(ns)) is not None and owner != os.getpid() and not _pid_alive(owner)
    ]
    for ns in stale:
        _kill_namespace(ns)
        ip("netns", "del", ns, check=False)
    return stale


@dataclass
class _Link:
    ns: str  # namespace holding the end we cut
    ifname: str
    addresses: dict[str, str]  # role -> its address as seen over this link


class NetnsLab:
    """Namespaces for `roles`, linked by a bridge (or a star of veth pairs around roles[0])."""

    _count = 0  # labs made by this process, so two labs never share a name

    def __init__(self, roles: Sequence[str], logs: Path, bridge: bool = True) -> None:
        if len(set(roles)) != len(roles) or not roles:
            raise ValueError(f"roles must be distinct and non-empty: {roles}")
        if len(roles) > 60:
            raise ValueError("at most 60 roles fit the /30 plan of 10.201.0.0/24")
        self.roles = list(roles)
        self.logs = logs
        self.bridge = bridge
        NetnsLab._count += 1
        self.tag = f"{PREFIX}{os.getpid()}-{NetnsLab._count}"
        self.links: dict[str, _Link] = {}
        self._created: list[str] = []
        self._procs: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []

    # ------------------------------------------------------------------ naming
    def ns(self, role: str) -> str:
        return f"{self.tag}-{role}"

    @property
    def switch(self) -> str:
        return f"{self.tag}-sw"

    def address(self, role: str, seen_from: str | None = None) -> str:
        """`role`'s IPv4 address; for the hub without a bridge, the one on `seen_from`'s link."""
        if self.bridge or role != self.roles[0]:
            return self.links[role].addresses[role]
        if seen_from is None:
            raise ValueError("the hub has one address per link: say which peer asks")
        return self.links[seen_from].addresses[role]

    # ------------------------------------------------------------------ topology
    def __enter__(self) -> NetnsLab:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _add_ns(self, name: str) -> None:
        ip("netns", "add", name)
        self._created.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def _build(self) -> None:
        for role in self.roles:
            self._add_ns(self.ns(role))
        if self.bridge:
            self._build_bridge()
        else:
            self._build_star()

    def _build_bridge(self) -> None:
        sw = self.switch
        self._add_ns(sw)
        ip("-n", sw, "link", "add", "br0", "type", "bridge")
        ip("-n", sw, "link", "set", "br0", "up")
        for i, role in enumerate(self.roles):
            port, address = f"p{i}", f"{SUBNET}.{10 + i}"
            self._veth(sw, port, self.ns(role))
            ip("-n", sw, "link", "set", port, "master", "br0", "up")
            self._configure(self.ns(role), f"{address}/24")
            self.links[role] = _Link(sw, port, {role: address})

    def _build_star(self) -> None:
        hub_role, hub = self.roles[0], self.ns(self.roles[0])
        for i, role in enumerate(self.roles[1:], start=1):
            port = f"p{i}"
            hub_address, address = f"{SUBNET}.{4 * i + 1}", f"{SUBNET}.{4 * i + 2}"
            self._veth(hub, port, self.ns(role))
            ip("-n", hub, "addr", "add", f"{hub_address}/30", "dev", port)
            ip("-n", hub, "link", "set", port, "up")
            self._configure(self.ns(role), f"{address}/30")
            self.links[role] = _Link(hub, port, {role: address, hub_role: hub_address})

    @staticmethod
    def _veth(ns: str, ifname: str, peer_ns: str) -> None:
        """A veth pair created inside `ns`, its peer moved straight into `peer_ns` as IFACE."""
        ip("-n", ns, "link", "add", ifname, "type", "veth", "peer", "name", IFACE, "netns", peer_ns)

    @staticmethod
    def _configure(ns: str, cidr: str) -> None:
        ip("-n", ns, "addr", "add", cidr, "dev", IFACE)
        ip("-n", ns, "link", "set", IFACE, "up")

    # ------------------------------------------------------------------ faults
    def cut(self, role: str) -> None:
        link = self.links[role]
        ip("-n", link.ns, "link", "set", link.ifname, "down")

    def restore(self, role: str) -> None:
        link = self.links[role]
        ip("-n", link.ns, "link", "set", link.ifname, "up")

    # ------------------------------------------------------------------ processes
    def popen(self, role: str, argv: Sequence[str], name: str | None = None) -> subprocess.Popen:
        """Start `argv` inside `role`'s namespace; output goes to logs/<name>.log."""
        log_path = self.logs / f"{name or role}.log"
        log = log_path.open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(role), *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=_die_with_parent,
        )
        self._procs.append((proc, log))
        return proc

    def reachable(self, role: str, address: str, timeout: float = 2.0) -> bool:
        """Does a TCP SYN from `role`'s namespace to `address` get an answer? A refusal (RST)
        counts: it came back over the link. Port 9 (discard) has no listener in our lab."""
        code = (
            "import socket, sys\n"
            "try:\n"
            f"    socket.create_connection(({address!r}, 9), timeout={timeout})\n"
            "except ConnectionRefusedError:\n"
            "    pass\n"
            "except OSError:\n"
            "    sys.exit(1)\n"
        )
        argv = ["ip", "netns", "exec", self.ns(role), sys.executable, "-c", code]
        return subprocess.run(argv, capture_output=True, timeout=timeout + 10).returncode == 0

    def log(self, name: str, tail: int = 40) -> str:
        path = self.logs / f"{name}.log"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "\n".join(lines[-tail:])

    # ------------------------------------------------------------------ cleanup
    def close(self) -> None:
        """Stop our processes, then delete our namespaces (which removes every link in them)."""
        for proc, _ in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc, log in self._procs:
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            log.close()
        for ns in reversed(self._created):
            _kill_namespace(ns)
            ip("netns", "del", ns, check=False)
        self._created.clear()

    def leftovers(self) -> list[str]:
        """Our namespaces that still exist (should be none after close())."""
        return [ns for ns in namespaces() if ns.startswith(f"{self.tag}-")]
