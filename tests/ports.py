"""Ports on 127.0.0.1 for the servers the tests start (S3, Azurite, Kafka, Prometheus)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (free when asked; closed again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
