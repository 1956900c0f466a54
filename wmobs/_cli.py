"""The ``wmobs`` command: ``wmobs demo`` runs the demo job."""

from __future__ import annotations

import sys

__all__ = ["main"]

USAGE = """usage: wmobs COMMAND [ARGS]

commands:
  demo     run a local streaming job with wmobs attached, serving /metrics
           (wmobs demo --help for its options)
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "demo":
        from wmobs.demo import main as demo_main

        return demo_main(rest)
    print(f"wmobs: unknown command {command!r}\n\n{USAGE}", end="", file=sys.stderr)
    return 2
