"""Real object-store servers on 127.0.0.1, started and stopped by the tests themselves: an
S3-compatible one (moto's standalone server, from PyPI) and Azure's (Azurite's blob service,
from npm; ``./dev test`` installs it into ``.tools/``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.ports import free_port
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


def _serve(
    command: list[str],
    port: int,
    what: str,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> Any:
    """Start ``command`` and wait until it accepts connections on ``port``."""
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.1)


def _moto(port: int) -> list[str]:
    """The command of moto's standalone server on 127.0.0.1:``port``."""
    return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]


def start_s3_server() -> S3Server:
    port = free_port()
    return S3Server(f"http://127.0.0.1:{port}", _serve(_moto(port), port, "moto's S3 server"))


@dataclass(frozen=True)
class ReadOnlyBucket:
    """A bucket on an S3 server that checks every request's credentials against its users'
    policies, and the keys of a user that may list and read the bucket but not write to it."""

    endpoint: str
    bucket: str
    key: str
    secret: str
    process: subprocess.Popen[bytes]

    @property
    def storage(self) -> Storage:
        return Storage(
            options={"endpoint_url": self.endpoint, "key": self.key, "secret": self.secret}
        )

    def s3a_conf(self) -> dict[str, str]:
        """Hadoop's S3A settings for this bucket alone (S3A's per-bucket options)."""
        per_bucket = f"fs.s3a.bucket.{self.bucket}"
        return {
            f"{per_bucket}.endpoint": self.endpoint,
            f"{per_bucket}.access.key": self.key,
            f"{per_bucket}.secret.key": self.secret,
        }


READ_ONLY = {  # what a reader may do (moto checks a bucket HEAD as s3:HeadBucket)
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket", "s3:HeadBucket", "s3:GetObject"],
            "Resource": "*",
        }
    ],
}


def start_read_only_bucket(bucket: str = "wmobs-read-only") -> ReadOnlyBucket:
    """moto's server with its access control on (``INITIAL_NO_AUTH_ACTION_COUNT``: the first
    four requests, which make the bucket, the user, its policy and its keys, go unchecked; every
    later one is checked), and a bucket that refuses the user's writes."""
    import json
    import os

    import boto3

    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "4"}
    endpoint = f"http://127.0.0.1:{port}"
    process = _serve(_moto(port), port, "moto's S3 server with access control", env=env)
    try:
        unchecked = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        unchecked |= {"aws_access_key_id": KEY, "aws_secret_access_key": SECRET}
        boto3.client("s3", **unchecked).create_bucket(Bucket=bucket)
        iam = boto3.client("iam", **unchecked)
        iam.create_user(UserName="reader")
        iam.put_user_policy(
            UserName="reader", PolicyName="read-only", PolicyDocument=json.dumps(READ_ONLY)
        )
        keys = iam.create_access_key(UserName="reader")["AccessKey"]
    except BaseException:
        process.kill()
        raise
    return ReadOnlyBucket(endpoint, bucket, keys["AccessKeyId"], keys["SecretAccessKey"], process)


ACCOUNT = "devstoreaccount1"
"""Azurite's well-known development account and key (public, in Azurite's documentation)."""
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
AZURITE = (
    Path(__file__).resolve().parent.parent / ".tools" / "node_modules" / ".bin" / "azurite-blob"
)


@dataclass(frozen=True)
class AzureServer:
    connection_string: str
    process: subprocess.Popen[bytes]

    @property
    def storage(self) -> Storage:
        return Storage(options={"connection_string": self.connection_string})

    def create_container(self, name: str) -> str:
        from azure.storage.blob import BlobServiceClient

        BlobServiceClient.from_connection_string(self.connection_string).create_container(name)
        return name

    def blobs(self, container: str, prefix: str = "") -> dict[str, bytes]:
        """Every blob under ``prefix``, read back with Azure's SDK (not through wmobs)."""
        from azure.storage.blob import BlobServiceClient

        client = BlobServiceClient.from_connection_string(self.connection_string)
        box = client.get_container_client(container)
        return {
            b.name: box.download_blob(b.name).readall()
            for b in box.list_blobs(name_starts_with=prefix)
        }


WASB_EMULATOR_PORT = 10000
"""Where Hadoop's WASB driver reaches Azure's storage emulator: in its emulator mode
(``fs.azure.storage.emulator.account.name``) Azure's legacy SDK connects to
``127.0.0.1:10000`` and nowhere else."""


def start_azurite(data: Path, port: int | None = None) -> AzureServer:
    """Azurite's blob service on ``port`` of 127.0.0.1 (default: a free one)."""
    port = port or free_port()
    command = [
        str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
        "--location", str(data), "--skipApiVersionCheck", "--loose",
    ]  # fmt: skip
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
    )
    return AzureServer(connection, _serve(command, port, "Azurite"))


TOOLS = Path(__file__).resolve().parents[1] / ".tools"


def hadoop_version() -> str | None:
    """The Hadoop version of the installed PySpark (its ``hadoop-client-api`` jar)."""
    import pyspark

    found = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    return found[0].name[len("hadoop-client-api-") : -len(".jar")] if found else None


def hadoop_has_wasb() -> bool:
    """Whether PySpark's Hadoop has the WASB driver (``wasb[s]://``), which Hadoop 3.5 removed."""
    version = hadoop_version()
    return version is not None and tuple(int(p) for p in version.split(".")[:2]) < (3, 5)


def wasb_conf() -> dict[str, str]:
    """Hadoop's WASB settings for Azurite on :data:`WASB_EMULATOR_PORT` (the development
    account as the storage emulator)."""
    return {"fs.azure.storage.emulator.account.name": f"{ACCOUNT}.blob.core.windows.net"}


def hadoop_aws_jars() -> list[Path]:
    """Hadoop's S3A connector, the AWS SDK and Hadoop's Azure connector (with what its WASB
    driver needs) at PySpark's Hadoop version (fetched by ``./dev`` with
    ``tools/maven/hadoop-cloud.xml``), or [] where they are missing."""
    version = hadoop_version()
    folder = TOOLS / f"hadoop-cloud-{version}"
    return sorted(folder.glob("*.jar")) if version and folder.is_dir() else []


def s3a_conf(server: S3Server) -> dict[str, str]:
    """Hadoop's S3A settings for ``server`` (what a cluster sets as ``spark.hadoop.*``)."""
    return {
        "fs.s3a.endpoint": server.endpoint,
        "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": KEY,
        "fs.s3a.secret.key": SECRET,
        "fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
    }
