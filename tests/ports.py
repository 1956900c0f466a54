"""Ports on 127.0.0.1 for the servers the tests start (S3, Azurite, Kafka, Prometheus, the
OpenTelemetry Collector), and their stop."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (free when asked; closed again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Terminates a server the tests started; kills it if it does not exit in ``timeout``."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)
