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
  jar [SPARK_VERSION]     print the path of wmobs' JAR for the installed Spark (or that
                          version): wmobs' Spark extension, the time policies' JVM engine
  spark-submit-args [SPARK_VERSION]
                          print the spark-submit flags that give a cluster the extension
                          (--jars ... --conf spark.sql.extensions=...)

options:
  -h, --help              this text
  -V, --version           print wmobs' version
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
    source = dashboards_dir()
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name in DASHBOARD_FILES:
            shutil.copyfile(source / name, target / name)
            print(target / name)
    except OSError as exc:
        print(f"wmobs dashboards: cannot write into {target}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


def _jar(argv: list[str]) -> int:
    from wmobs.policy import JarError, jar

    if len(argv) > 1:
        print("usage: wmobs jar [SPARK_VERSION]", file=sys.stderr)
        return 2
    try:
        print(jar(*argv))
    except JarError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


def _submit_args(argv: list[str]) -> int:
    import shlex

    from wmobs.policy import JarError, submit_args

    if len(argv) > 1:
        print("usage: wmobs spark-submit-args [SPARK_VERSION]", file=sys.stderr)
        return 2
    try:
        print(shlex.join(submit_args(*argv)))
    except JarError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


def _demo(argv: list[str]) -> int:
    from wmobs.demo import main as demo_main

    return demo_main(argv)


def _advise(argv: list[str]) -> int:
    from wmobs.advise import main as advise_main

    return advise_main(argv)


_COMMANDS = {
    "demo": _demo,
    "rules": _rules,
    "advise": _advise,
    "dashboards": _dashboards,
    "jar": _jar,
    "spark-submit-args": _submit_args,
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from wmobs._version import __version__

        print(f"wmobs {__version__}")
        return 0
    command = _COMMANDS.get(args[0])
    if command is None:
        print(f"wmobs: unknown command {args[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    return command(args[1:])
