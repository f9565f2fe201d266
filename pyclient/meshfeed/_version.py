"""The version of meshfeed: the one place it is written. The wheel's metadata
(pyproject.toml, dynamic version), the Go binary bundled in it (-ldflags -X
main.version, see setup.py and the Makefile) and ``meshfeed.__version__`` read it."""

__version__ = "0.1.0"
