"""A real Redis Cluster for the tests: three masters from ``redis-server --cluster-enabled yes`` on free
ports, joined with ``redis-cli --cluster create``, stopped and removed afterwards."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cluster_ports(count: int) -> list[int]:
    """Ports whose cluster bus port (port + 10000) is free as well."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 < 65536 and port not in ports and _free(port + 10000):
            ports.append(port)
    return ports


def _info(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"CLUSTER INFO\r\n")
            return s.recv(4096).decode(errors="replace")
    except OSError:
        return ""


@dataclass
class RedisClusterProcess:
    masters: int = 3
    base_port: int = 0
    """Where the nodes' ports start (``2 × masters`` in a row: the client ports, then the cluster bus ports), from
    the caller's own range below the kernel's ephemeral ports; 0: ports the kernel picks (the bus at + 10000).
    A port picked from the ephemeral range can be taken by an outgoing connection before the node binds it."""
    ports: list[int] = field(default_factory=list)
    workdir: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def start(self) -> str:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            raise RuntimeError("redis-server and redis-cli are needed for the Cluster tests "
                               "(apt-get install redis-server)")
        self.workdir = tempfile.mkdtemp(prefix="opspilot-cluster-")
        if self.base_port:
            self.ports = [self.base_port + i for i in range(self.masters)]
            buses = [self.base_port + self.masters + i for i in range(self.masters)]
        else:
            self.ports = _cluster_ports(self.masters)
            buses = [p + 10000 for p in self.ports]
        for port, bus in zip(self.ports, buses, strict=True):
            self.procs.append(subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-port", str(bus),  # Redis 7: the bus port named, not port + 10000
                 "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", "2000",
                 "--save", "", "--appendonly", "no", "--dir", self.workdir],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while not all("cluster_state" in _info(p) for p in self.ports):
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"cluster nodes on ports {self.ports} never answered")
            time.sleep(0.05)
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True, timeout=30)
        deadline = time.monotonic() + 20
        while not all("cluster_state:ok" in _info(p) for p in self.ports):
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the Redis Cluster never reached cluster_state:ok")
            time.sleep(0.1)
        return self.url

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=10)
        self.procs.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)
