"""``python -m meshfeed COMMAND``: command-line tools of the Python client.

Commands:
  bench   accelerator utilization and loader throughput on your data
          (``python -m meshfeed bench --help``)
"""

from __future__ import annotations

import sys

_COMMANDS = ("bench",)


def main(argv: list[str] | None = None) -> int:
    """Dispatches to a command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__.strip())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "bench":
        from ._src.bench import main as bench_main
        return bench_main(rest)
    print(f"meshfeed: unknown command {cmd!r}; commands: {', '.join(_COMMANDS)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
