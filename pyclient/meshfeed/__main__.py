"""``meshfeed COMMAND`` (the console command; also ``python -m meshfeed COMMAND``).

The server's commands (serve, plan, gen, inspect, read, version) run the
meshfeed binary: the one bundled in the installed wheel unless $MESHFEED_BIN
names another (in a source checkout: the bin/meshfeed that `make build`
wrote); ``meshfeed COMMAND -h`` shows a command's flags.
The Python client's own command:
  bench   accelerator utilization and loader throughput on your data
          (``meshfeed bench --help``; also the ``meshfeed-bench`` command)
"""

from __future__ import annotations

import os
import subprocess
import sys

_PY_COMMANDS = ("bench",)


def _help() -> str:
    """This module's doc, then the binary's own list of commands (or why it is missing)."""
    from ._src.errors import BinaryNotFoundError
    from ._src.server import find_binary
    text = __doc__.strip()
    try:
        binary = find_binary()
    except BinaryNotFoundError as e:
        return f"{text}\n\n{e}"
    r = subprocess.run([binary, "--help"], capture_output=True, text=True)
    return f"{text}\n\nThe binary ({binary}):\n{(r.stdout + r.stderr).strip()}"


def _exec_binary(argv: list[str]) -> int:
    """Replaces this process with the meshfeed binary (POSIX), so that
    signals, exit status and stdio are the binary's own; elsewhere runs it."""
    from ._src.errors import BinaryNotFoundError
    from ._src.server import find_binary
    try:
        binary = find_binary()
    except BinaryNotFoundError as e:
        print(f"meshfeed: {e}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execv(binary, [binary, *argv])
    return subprocess.call([binary, *argv])


def main(argv: list[str] | None = None) -> int:
    """Dispatches to a command; returns the exit status (a server command
    does not return: the binary replaces this process)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_help())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "bench":
        from ._src.bench import main as bench_main
        return bench_main(rest)
    return _exec_binary(argv)  # the binary reports unknown commands itself


def console() -> None:
    """The ``meshfeed`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
