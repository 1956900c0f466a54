"""The ``wmobs`` command: ``wmobs demo`` runs the demo job."""

from __future__ import annotations

import sys

__all__ = ["main"]

USAGE = """usage: wmobs COMMAND [ARGS]

commands:
  demo                    run a local streaming job with wmobs attached, serving /metrics
                          (wmobs demo --help for its options)
  rules [OPTIONS]         print the Prometheus alerting rules (wmobs rules --help)
  advise [OPTIONS]        suggest tolerances from the lateness distributions (wmobs advise -h)
  dashboards export DIR   write the Grafana dashboard and the alerting rules into DIR
"""


def _rules(argv: list[str]) -> int:
    import argparse
    from dataclasses import fields

    from wmobs.rules import RulesConfig, render

    defaults = RulesConfig()
    parser = argparse.ArgumentParser(
        prog="wmobs rules",
        description="Print wmobs' Prometheus alerting rules with your thresholds.",
    )
    for f in fields(RulesConfig):
        flag = "--" + f.name.replace("_", "-")
        parser.add_argument(flag, default=getattr(defaults, f.name), help="default: %(default)r")
    args = parser.parse_args(argv)
    try:
        config = RulesConfig(**{f.name: getattr(args, f.name) for f in fields(RulesConfig)})
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.write(render(config))
    return 0


def _dashboards(argv: list[str]) -> int:
    import shutil
    from pathlib import Path

    from wmobs._resources import DASHBOARD_FILES, dashboards_dir

    if len(argv) != 2 or argv[0] != "export":
        print("usage: wmobs dashboards export DIR", file=sys.stderr)
        return 2
    target = Path(argv[1])
    target.mkdir(parents=True, exist_ok=True)
    source = dashboards_dir()
    for name in DASHBOARD_FILES:
        shutil.copyfile(source / name, target / name)
        print(target / name)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "demo":
        from wmobs.demo import main as demo_main

        return demo_main(rest)
    if command == "rules":
        return _rules(rest)
    if command == "advise":
        from wmobs.advise import main as advise_main

        return advise_main(rest)
    if command == "dashboards":
        return _dashboards(rest)
    print(f"wmobs: unknown command {command!r}\n\n{USAGE}", end="", file=sys.stderr)
    return 2
