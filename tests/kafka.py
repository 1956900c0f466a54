"""A real one-node Kafka broker (KRaft) on 127.0.0.1 for the tests, from Maven Central's jars
(``./dev`` fetches them into ``.tools/kafka/broker`` with ``tools/maven/kafka-broker.xml``), and
Spark's Kafka source for the running Spark (``.tools/kafka/spark-<version>``)."""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.ports import free_port, stop_process

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / ".tools" / "kafka"
BROKER = TOOLS / "broker"


@dataclass
class KafkaBroker:
    bootstrap: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        stop_process(self.process)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    assert found, "no java to run the Kafka broker with"
    return found


def start_kafka(work: Path, timeout: float = 120) -> KafkaBroker:
    """Formats a KRaft log in ``work`` and starts a combined broker and controller; returns
    once it accepts connections."""
    assert BROKER.is_dir(), (
        f"the Kafka broker's jars are missing from {BROKER} (./dev fetches them)"
    )
    port, controller = free_port(), free_port()
    config = work / "server.properties"
    config.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{controller}",
                f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                f"log.dirs={work / 'data'}",
                "num.partitions=3",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=false",
                # The tests' records carry arrival times from the reference cases (2026-01-01):
                # time-based retention would delete them at its first check.
                "log.retention.ms=-1",
                "",
            ]
        )
    )
    (work / "log4j2.properties").write_text(
        "rootLogger.level = WARN\nrootLogger.appenderRef.file.ref = file\n"
        "appender.file.type = File\nappender.file.name = file\n"
        f"appender.file.fileName = {work / 'broker.log'}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = %d %p %c: %m%n\n"
    )
    classpath = f"{BROKER}/*"
    java = [_java(), f"-Dlog4j2.configurationFile={work / 'log4j2.properties'}", "-cp", classpath]
    cluster = "-"
    while cluster.startswith("-"):  # as Kafka's Uuid.randomUuid: its options parser reads a
        # value that starts with "-" as an option (1 id in 64)
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    formatted = subprocess.run(
        [*java, "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert formatted.returncode == 0, f"kafka-storage format: {formatted.stderr[-3000:]}"
    log = work / "broker.out"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*java, "-Xmx512m", "kafka.Kafka", str(config)], stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, f"the Kafka broker exited: {log.read_text()[-3000:]}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            assert time.monotonic() < deadline, "the Kafka broker did not start in time"
            time.sleep(0.2)
    return KafkaBroker(f"127.0.0.1:{port}", process, log)


def spark_kafka_jars(spark_version: str) -> list[Path]:
    """The jars of Spark's Kafka source to run with ``spark_version`` (fetched by ``./dev``),
    or [] where they are missing."""
    version = connector_version(spark_version)
    folder = TOOLS / f"spark-{version}"
    return sorted(folder.glob("*.jar")) if version and folder.is_dir() else []


CONNECTORS = {"3.5": "3.5.7", "4.0": "4.0.0", "4.1": "4.1.3", "4.2": "4.2.0", "4.3": "4.2.0"}
"""Per Spark line, the version of Spark's Kafka source to run its tests with: the line's own
from Maven Central, whose connectors lag PyPI's patch releases (a connector runs with any patch
release of its line), and for 4.3, which Maven Central does not have yet, 4.2's. On 4.1 not
4.1.1, which fails a replayed micro-batch in its progress metrics (SPARK-55271): 4.1.3."""

TOKEN_PROVIDERS = {"4.1.3": "4.1.1"}
"""Spark's Kafka token provider (the one module of Spark's the source needs beyond Spark
itself) where Maven Central, as this project's machines reach it, lacks the source's own
version: it serves 4.1.3's source but the token provider only up to 4.1.1 (a patch release
apart; the Kafka tests pass with it)."""


def connector_version(spark_version: str) -> str | None:
    """The version of Spark's Kafka source to run with ``spark_version``."""
    return CONNECTORS.get(".".join(spark_version.split(".")[:2]))


def token_provider_version(connector: str) -> str:
    """The version of Spark's Kafka token provider to run Spark's Kafka source ``connector``
    with."""
    return TOKEN_PROVIDERS.get(connector, connector)
