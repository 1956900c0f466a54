"""The wheel's build hook: builds wmobs' Spark extension with Maven, one JAR per Spark line
(``jvm/jars.py``), so that the wheel carries them in ``wmobs/_jars/``. Nothing is compiled on
a user's machine: an sdist build needs Maven and a JDK, a wheel needs neither.

``WMOBS_SKIP_JARS=1`` builds without them (a source checkout whose JARs are built already,
or a listener-only install): the time policies then run on the Python engine, and say so.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class JarsBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("WMOBS_SKIP_JARS") == "1":
            return
        sys.path.insert(0, str(Path(self.root) / "jvm"))
        try:
            import jars
        finally:
            sys.path.pop(0)
        tests = os.environ.get("WMOBS_JAR_TESTS", "1") != "0"
        try:
            built = jars.build(tests=tests)
        except jars.BuildError as exc:
            raise RuntimeError(str(exc)) from None
        if version == "editable":  # the package is the source tree, JARs and all
            return
        for path in built:
            relative = path.relative_to(self.root).as_posix()
            build_data["force_include"][str(path)] = relative
