"""A real S3-compatible server on 127.0.0.1 (moto's standalone server), started and stopped by
the tests themselves."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from wmobs import Storage

KEY, SECRET = "wmobs-test-key", "wmobs-test-secret"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    process: subprocess.Popen[bytes]

    @property
    def storage(self) -> Storage:
        """How wmobs reaches it: endpoint and credentials as storage options."""
        return Storage(options={"endpoint_url": self.endpoint, "key": KEY, "secret": SECRET})

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
        )

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under ``prefix``, read back with boto3 (not through wmobs)."""
        client = self.client()
        listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
        return {
            o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed
        }


def start_s3_server(timeout: float = 60.0) -> S3Server:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while True:  # until it accepts connections
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("moto's S3 server did not start") from None
            time.sleep(0.1)
    return S3Server(f"http://127.0.0.1:{port}", process)
