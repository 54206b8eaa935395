"""Real servers for the tests of the deployment setup, started on loopback on free ports and stopped
afterwards: PostgreSQL from the machine's own binaries (initdb/pg_ctl into a temp dir), and moto's
S3-compatible server (`python -m moto.server`)."""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

PG_USER = "lessonsync"
RUN_AS = "nobody"  # PostgreSQL refuses to run as root; this account exists on every Debian system


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def postgres_bin_dir() -> Path | None:
    """Where initdb and pg_ctl are: on PATH, or Debian's /usr/lib/postgresql/<version>/bin."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def why_postgres_cannot_run() -> str | None:
    if postgres_bin_dir() is None:
        return (
            "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin: "
            "install Debian's `postgresql` package (.ci/run does when apt-get is available)"
        )
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without `runuser`: PostgreSQL cannot be started as an unprivileged user"
    return None


@dataclass
class PostgresServer:
    port: int
    password: str

    def url(self, database: str) -> str:
        return f"postgresql://{PG_USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def store_password_as_md5(self) -> None:
        """Password auth stays on, but as md5: dagster-postgres opens a connection per storage call (no pool),
        and SCRAM's key derivation on each one made every Dagster event several times slower here."""
        import psycopg2

        conn = psycopg2.connect(self.url("postgres"))
        try:
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute("SET password_encryption = 'md5'")
                cursor.execute(f"ALTER USER {PG_USER} PASSWORD %s", [self.password])
        finally:
            conn.close()

    def create_database(self, name: str) -> str:
        import psycopg2  # comes with dagster-postgres

        conn = psycopg2.connect(self.url("postgres"))
        try:
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)


def _as_postgres_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", RUN_AS, "--", *command] if os.geteuid() == 0 else command


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """initdb into a temp dir, start on 127.0.0.1:<free port> (no Unix socket outside that dir), password
    auth over TCP; stopped and removed on exit."""
    bin_dir = postgres_bin_dir()
    assert bin_dir is not None
    root = Path(tempfile.mkdtemp(prefix="lessonsync-pg-"))
    data, password = root / "data", secrets.token_urlsafe(16)
    pwfile = root / "pwfile"
    pwfile.write_text(password)
    if os.geteuid() == 0:
        shutil.chown(root, RUN_AS)
        shutil.chown(pwfile, RUN_AS)
    port = free_port()
    try:
        subprocess.run(
            _as_postgres_user(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    PG_USER,
                    f"--pwfile={pwfile}",
                    "--auth=md5",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off"
        subprocess.run(
            _as_postgres_user(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(root / "server.log"),
                    "-w",
                    "-t",
                    "120",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=150,
        )
        try:
            server = PostgresServer(port, password)
            server.store_password_as_md5()
            yield server
        finally:
            subprocess.run(
                _as_postgres_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                capture_output=True,
                timeout=120,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class S3Server:
    endpoint: str

    def env(self) -> dict[str, str]:
        """The usual AWS variables pointing at this server (moto takes any key unless IAM auth is enabled)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "lessonsync-test",
            "AWS_SECRET_ACCESS_KEY": "s3-secret-" + secrets.token_hex(8),
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="lessonsync-test",
            aws_secret_access_key="any",
            region_name="us-east-1",
        ).create_bucket(Bucket=name)

    @contextmanager
    def checking_credentials(self) -> Iterator[None]:
        """Within the block the server checks every request's key against its IAM, where ours are unknown."""
        self._set_auth_after("0")
        try:
            yield
        finally:
            self._set_auth_after("inf")

    def _set_auth_after(self, requests: str) -> None:
        httpx.post(f"{self.endpoint}/moto-api/reset-auth", content=requests.encode(), timeout=30).raise_for_status()


@contextmanager
def s3_server(log: Path | None = None) -> Iterator[S3Server]:
    """moto's server in its own process (serving S3 in the tests' process would compete with the sync for
    the GIL), on 127.0.0.1:<free port>; stopped on exit. `log`: where its output (the access log: a line a request)
    goes, else nowhere."""
    port = free_port()
    sink = log.open("w") if log is not None else subprocess.DEVNULL
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=sink, stderr=sink
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=2)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's server did not start on {endpoint}") from None
                time.sleep(0.1)
        yield S3Server(endpoint)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        if log is not None:
            sink.close()
