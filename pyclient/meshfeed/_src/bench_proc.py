"""Process accounting for the benchmark: memory and CPU time of a process and
its descendants, read from /proc (Linux; elsewhere every figure is 0)."""

from __future__ import annotations

import os
import threading

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _status(pid: int) -> dict[str, int]:
    """/proc/PID/status's Vm* fields in bytes (empty if the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":", 1)
                    out[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM) in bytes; 0 if unknown."""
    return _status(pid).get("VmHWM", 0)


def _pss(pid: int) -> int:
    """Proportional set size in bytes (shared pages split between their users);
    VmRSS where smaps_rollup is unavailable; 0 if the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return _status(pid).get("VmRSS", 0)


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds user+system) of a live process, else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces.
    rest = s[s.rfind(")") + 2:].split()
    try:
        return int(rest[1]), (int(rest[11]) + int(rest[12])) / _CLK_TCK
    except (IndexError, ValueError):
        return None


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process has used; 0 if it is gone."""
    st = _stat(pid)
    return st[1] if st else 0.0


def descendants(root: int) -> list[int]:
    """The live descendants of ``root`` (children, their children, ...)."""
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    kids: dict[int, list[int]] = {}
    for p in pids:
        st = _stat(p)
        if st is not None:
            kids.setdefault(st[0], []).append(p)
    out, todo = [], list(kids.get(root, ()))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


class TreeSampler:
    """Samples a process tree (``root`` and its descendants) every
    ``interval`` seconds in a background thread: the peak of the summed
    proportional set size (``peak_bytes``), of the summed resident set
    (``peak_rss_bytes``: shared pages counted once per process), and each
    process's CPU seconds, remembered after it exits (``cpu_seconds()``)."""

    def __init__(self, root: int | None = None, interval: float = 0.1):
        self.root = os.getpid() if root is None else root
        self.interval = interval
        self.peak_bytes = 0
        self.peak_rss_bytes = 0
        self._cpu: dict[int, float] = {}
        self._cpu0: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Takes one sample now."""
        pids = [self.root] + descendants(self.root)
        total = rss = 0
        cpu = {}
        for p in pids:
            total += _pss(p)
            rss += _status(p).get("VmRSS", 0)
            c = cpu_seconds(p)
            if c:
                cpu[p] = c
        with self._lock:
            self.peak_bytes = max(self.peak_bytes, total)
            self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
            self._cpu.update(cpu)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> "TreeSampler":
        """Samples once, remembers the CPU seconds used so far (cpu_seconds()
        counts from here), and starts the thread."""
        self.sample()
        with self._lock:
            self._cpu0 = dict(self._cpu)
        self._thread = threading.Thread(target=self._run, name="meshfeed-bench-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Takes a last sample and stops the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def cpu_seconds(self) -> float:
        """CPU seconds the tree used since start() (processes that exited
        count up to their last sample)."""
        with self._lock:
            return sum(max(0.0, c - self._cpu0.get(p, 0.0)) for p, c in self._cpu.items())

