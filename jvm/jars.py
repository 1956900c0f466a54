"""Builds wmobs' Spark extension with Maven, one JAR per Spark line, into ``wmobs/_jars/``.

    python jvm/jars.py                 # every line (what the wheel's build hook runs)
    python jvm/jars.py --lines 4.3     # one line
    python jvm/jars.py --skip-tests    # without the JUnit tests

A line is built again only when ``jvm/`` or the reference cases changed since its JAR was.
Spark 4.3 is not on Maven Central: its Spark jars come from PyPI's PySpark 4.3 source archive
(checked against PyPI's sha256), kept in ``jvm/.cache/spark-jars/``. Standard library only: the
build hook runs it in pip's isolated build environment.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

JVM = Path(__file__).resolve().parent
ROOT = JVM.parent
OUT = ROOT / "wmobs" / "_jars"
REFERENCE = ROOT / "tests" / "reference"
# Spark line -> (Scala version, the PySpark release whose jars stand in for Maven Central's;
# None where Central has them). The versions of each line are in pom.xml's profiles.
LINES: dict[str, tuple[str, str | None]] = {
    "3.5": ("2.12", None),
    "4.0": ("2.13", None),
    "4.1": ("2.13", None),
    "4.2": ("2.13", None),
    "4.3": ("2.13", "4.3.0"),
}
_SPARK_MODULES = ("sql", "catalyst", "sql-api", "core", "common-utils", "unsafe")


class BuildError(RuntimeError):
    """The JARs cannot be built here."""


def version() -> str:
    """The package's version (``wmobs/_version.py``): the JARs carry the same."""
    text = (ROOT / "wmobs" / "_version.py").read_text()
    found = re.search(r'__version__\s*=\s*"([^"]+)"', text)
    if not found:
        raise BuildError("wmobs/_version.py has no __version__")
    return found.group(1)


def jar_name(line: str) -> str:
    return f"wmobs-spark-{line}_{LINES[line][0]}.jar"


def _newest_source() -> float:
    paths = [JVM / "pom.xml", JVM / "settings.xml", Path(__file__), ROOT / "wmobs" / "_version.py"]
    for folder in (JVM / "src", REFERENCE):
        paths += [p for p in folder.rglob("*") if p.is_file()]
    return max(p.stat().st_mtime for p in paths if p.exists())


def _mvn() -> str:
    found = shutil.which("mvn")
    if not found:
        raise BuildError(
            "wmobs: building the wheel builds wmobs' Spark extension with Maven (mvn, with a "
            "JDK 17): install Maven, or install wmobs from a wheel, which carries the JARs"
        )
    return found


def _pypi_sdist(release: str) -> tuple[str, str]:
    """The URL and sha256 of PySpark ``release``'s source archive on PyPI."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    request = urllib.request.Request(
        f"{index}/pyspark/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        files = json.load(response)["files"]
    name = f"pyspark-{release}.tar.gz"
    for entry in files:
        if entry["filename"] == name:
            return entry["url"], entry["hashes"]["sha256"]
    raise BuildError(f"wmobs: PyPI has no {name}")


def spark_jars(release: str) -> Path:
    """A folder with Spark ``release``'s own module jars, from PyPI's PySpark archive."""
    folder = JVM / ".cache" / "spark-jars" / release
    wanted = [f"spark-{m}_2.13-{release}.jar" for m in _SPARK_MODULES]
    if all((folder / name).is_file() for name in wanted):
        return folder
    url, sha256 = _pypi_sdist(release)
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"pyspark-{release}.tar.gz"
    print(f"wmobs: fetching PySpark {release}'s jars from PyPI", file=sys.stderr)
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=600) as response, archive.open("wb") as out:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != sha256:
        archive.unlink()
        raise BuildError(f"wmobs: {url} does not have PyPI's sha256")
    with tarfile.open(archive) as tar:
        for member in tar:
            name = member.name.rsplit("/", 1)[-1]
            if name in wanted and "/deps/jars/" in member.name:
                source = tar.extractfile(member)
                assert source is not None
                (folder / name).write_bytes(source.read())
    archive.unlink()
    missing = [name for name in wanted if not (folder / name).is_file()]
    if missing:
        raise BuildError(f"wmobs: PySpark {release}'s archive lacks {', '.join(missing)}")
    return folder


def build(lines: list[str] | None = None, *, tests: bool = True, force: bool = False) -> list[Path]:
    """Builds the JARs of ``lines`` (default: all) into ``wmobs/_jars/``; their paths."""
    chosen = list(LINES) if lines is None else lines
    unknown = [line for line in chosen if line not in LINES]
    if unknown:
        raise BuildError(f"wmobs: no Spark line {unknown[0]} (lines: {', '.join(LINES)})")
    OUT.mkdir(parents=True, exist_ok=True)
    newest = _newest_source()
    built = []
    for line in chosen:
        target = OUT / jar_name(line)
        built.append(target)
        if not force and target.is_file() and target.stat().st_mtime >= newest:
            continue
        command = [_mvn(), "-B", "-q", "-Dstyle.color=never", "-gs", str(JVM / "settings.xml")]
        command += ["-f", str(JVM / "pom.xml")]
        command.append(f"-Pspark-{line}")
        command += [f"-Drevision={version()}", "clean", "package"]
        release = LINES[line][1]
        if release is not None:
            command.append(f"-Dspark.jars={spark_jars(release)}")
        if not tests:
            command.append("-DskipTests")
        started = time.monotonic()
        done = subprocess.run(command, cwd=JVM, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-20000:] + done.stderr[-5000:])
            raise BuildError(f"wmobs: the Maven build of Spark {line}'s JAR failed")
        shutil.copyfile(JVM / "target" / jar_name(line), target)
        print(f"wmobs: built {target.name} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", nargs="*", default=None, help=f"of {', '.join(LINES)}")
    parser.add_argument("--skip-tests", action="store_true", help="without the JUnit tests")
    parser.add_argument("--force", action="store_true", help="even if up to date")
    args = parser.parse_args(argv)
    try:
        for path in build(args.lines, tests=not args.skip_tests, force=args.force):
            print(path)
    except BuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
