"""What `cdi image-upload` does, step by step (cdi.cli.imageupload parses its arguments)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from kubernetes import config as kubeconfig

from cdi.api import names
from cdi.api.spec import Obj, annotations
from cdi.controller.kube import Kube, KubeError, path
from importer import contract as ic
from importer.checksum import Expected
from importer.errors import ImportFailed
from uploadproxy import client

POLL = 1.0  # virtctl polls every 2 s; answering a second sooner costs one more GET
PROCESSING_TIMEOUT = 24 * 3600.0
TOKEN_PREFIX = "token-for-virtctl-"
MODES = {"block": names.VOLUME_MODE_BLOCK, "filesystem": names.VOLUME_MODE_FILESYSTEM}


class Failed(Exception):
    """The one-line reason the upload failed."""


def _namespace(args: argparse.Namespace) -> str:
    if args.namespace:
        return str(args.namespace)
    try:
        _, active = kubeconfig.list_kube_config_contexts(config_file=args.kubeconfig)
        return str((active.get("context") or {}).get("namespace") or "default")
    except (kubeconfig.ConfigException, OSError):
        in_pod = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        return in_pod.read_text().strip() if in_pod.exists() else "default"


def _kube(args: argparse.Namespace) -> Kube:
    if not args.kubeconfig:
        return Kube.from_environment()
    from kubernetes import client as k8s  # noqa: PLC0415

    configuration = k8s.Configuration()
    kubeconfig.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)
    return Kube(configuration)


class Upload:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.archive = args.archive_path is not None
        self.file: Path = args.archive_path if self.archive else args.image_path
        self.kind = args.kind
        self.name = args.name
        self.mode = MODES["block"] if args.block_volume else MODES.get(args.volume_mode or "")
        self._check_arguments()
        self.namespace = _namespace(args)
        self.kube = _kube(args)

    def _check_arguments(self) -> None:
        if not self.file.is_file():
            raise Failed(f"cannot read {self.file}: no such file")
        if self.archive and self.mode == names.VOLUME_MODE_BLOCK:
            raise Failed("In archive upload the volume mode should always be filesystem")
        if self.args.access_mode == "ReadOnlyMany":
            raise Failed("cannot upload to a readonly volume, use either ReadWriteOnce or ReadWriteMany if supported")
        if self.args.checksum:
            try:
                Expected(self.args.checksum)
            except ImportFailed as error:
                raise Failed(error.message) from None

    def _path(self, plural: str, name: str | None = None, *, group: str = "", namespaced: bool = True) -> str:
        return path(group=group, version=names.VERSION if group else "v1", plural=plural,
                    namespace=self.namespace if namespaced else None, name=name)

    def _pvc(self) -> Obj | None:
        return self.kube.get(self._path("persistentvolumeclaims", self.name))

    def _dv(self) -> Obj | None:
        return self.kube.get(self._path(names.DATAVOLUMES, self.name, group=names.GROUP))

    def run(self) -> None:
        try:
            self._prepare()
            self._wait_ready()
            token = self._token()
            url = self._proxy_url()
            print(f"Uploading data to {url}", flush=True)
            verify: bool | str = False if self.args.insecure else (self.args.uploadproxy_ca or True)
            try:
                client.upload(url, self.file, token=token, verify=verify, checksum=self.args.checksum,
                              retries=max(1, self.args.retry), progress=not self.args.no_progress,
                              refresh_token=self._token)
            except client.UploadFailed as error:
                raise Failed(str(error)) from None
            print("Uploading data completed successfully, waiting for processing to complete, you can hit ctrl-c "
                  "without interrupting the progress", flush=True)
            self._wait_processed()
        except OSError as error:  # the API server's errors (KubeError) and the upload's connection errors
            raise Failed(str(error)) from None
        print("Processing completed successfully", flush=True)
        print(f"Uploading {self.file} completed successfully", flush=True)

    # 1. the DataVolume or PVC

    def _prepare(self) -> None:
        pvc = self._pvc()
        if pvc is None:
            if self.args.no_create:
                raise Failed(f"No PersistentVolumeClaim {self.namespace}/{self.name} found and --no-create given")
            self._create()
            return
        if self.kind == "dv" and self._dv() is None:
            raise Failed(f"No DataVolume is associated with the existing PVC {self.namespace}/{self.name}")
        notes = annotations(pvc)
        if notes.get(names.ANN_POD_PHASE) == names.SUCCEEDED:
            raise Failed(f"PVC {self.name} already successfully imported/cloned/updated")
        if names.ANN_UPLOAD_TARGET not in notes:
            if not self.args.no_create:
                raise Failed(f"PVC {self.name} not available for upload")
            self.kube.patch(self._path("persistentvolumeclaims", self.name),
                            {"metadata": {"annotations": {names.ANN_UPLOAD_TARGET: ""}}})
        if self.archive and notes.get(names.ANN_CONTENT_TYPE) != ic.CONTENT_ARCHIVE:
            raise Failed(f"PVC {self.name} doesn't have archive contentType annotation")
        print(f"Using existing PVC {self.namespace}/{self.name}", flush=True)

    def _create(self) -> None:
        args = self.args
        if not args.size:
            raise Failed("when creating a resource, the size must be specified")
        if args.storage_class and self.kube.get(path(group="storage.k8s.io", version="v1", plural="storageclasses",
                                                      name=args.storage_class)) is None:
            raise Failed(f"storageclasses.storage.k8s.io \"{args.storage_class}\" not found")
        content = ic.CONTENT_ARCHIVE if self.archive else ic.CONTENT_KUBEVIRT
        storage: Obj = {"resources": {"requests": {"storage": args.size}}}
        if args.storage_class:
            storage["storageClassName"] = args.storage_class
        if args.access_mode:
            storage["accessModes"] = [args.access_mode]
        if self.mode or self.archive:
            storage["volumeMode"] = self.mode or names.VOLUME_MODE_FILESYSTEM
        metadata: Obj = {"name": self.name, "namespace": self.namespace}
        if args.force_bind:
            metadata["annotations"] = {names.ANN_IMMEDIATE_BINDING: ""}
        if self.kind == "dv":
            body = {"apiVersion": names.API_VERSION, "kind": names.DATAVOLUME, "metadata": metadata,
                    "spec": {"source": {"upload": {}}, "contentType": content, "storage": storage}}
            self._create_or_fail(self._path(names.DATAVOLUMES, group=names.GROUP), body)
            print(f"DataVolume {self.namespace}/{self.name} created", flush=True)
            return
        storage.setdefault("accessModes", ["ReadWriteOnce"])
        metadata.setdefault("annotations", {}).update({names.ANN_UPLOAD_TARGET: "", names.ANN_CONTENT_TYPE: content})
        metadata["labels"] = {names.LABEL_APPLY_STORAGE_PROFILE: "true"}
        self._create_or_fail(self._path("persistentvolumeclaims"),
                             {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": storage})
        print(f"PersistentVolumeClaim {self.namespace}/{self.name} created", flush=True)

    def _create_or_fail(self, url_path: str, body: Obj) -> None:
        try:
            self.kube.call("POST", url_path, body=body)
        except KubeError as error:
            raise Failed(str(error)) from None

    # 2. the upload pod

    def _wait_ready(self) -> None:
        print(f"Waiting for PVC {self.name} upload pod to be ready...", flush=True)
        self._poll(self._ready, timeout=self.args.wait_secs, timeout_message="timed out waiting for the condition")
        print("Pod now ready", flush=True)

    def _ready(self) -> bool:
        self._fail_on_events()
        if self.kind == "dv":
            dv = self._dv()
            if dv is None:
                raise Failed(f"DataVolume {self.namespace}/{self.name} is gone")
            phase = (dv.get("status") or {}).get("phase", "")
            if phase in (names.WAIT_FOR_FIRST_CONSUMER, names.PENDING_POPULATION) and not self.args.force_bind:
                raise Failed(f"cannot upload to DataVolume in {phase} phase, make sure the PVC is Bound, or use "
                             f"force-bind flag")
            if phase == names.FAILED:
                raise Failed(f"DataVolume {self.namespace}/{self.name} failed: {_running_message(dv)}")
            return phase == names.UPLOAD_READY
        pvc = self._pvc()
        return pvc is not None and annotations(pvc).get(names.ANN_POD_READY, "").lower() == "true"

    def _fail_on_events(self) -> None:
        for event in self.kube.list(self._path("events")):
            involved = event.get("involvedObject") or {}
            if involved.get("name") != self.name:
                continue
            message = event.get("message", "")
            if (involved.get("kind") == "PersistentVolumeClaim" and event.get("reason") == "ProvisioningFailed"
                    and "the object has been modified" not in message):
                raise Failed(f"Provisioning failed: {message}")
            if involved.get("kind") == names.DATAVOLUME and event.get("reason") == names.EVENT_ERR_CLAIM_NOT_VALID:
                raise Failed(f"Claim not valid: {message}")

    # 3. the token and the proxy

    def _token(self) -> str:
        body = {"apiVersion": names.UPLOAD_API_VERSION, "kind": names.UPLOAD_TOKEN_REQUEST,
                "metadata": {"generateName": TOKEN_PREFIX, "namespace": self.namespace},
                "spec": {"pvcName": self.name}}
        try:
            _, answer = self.kube.call("POST", self._path(names.UPLOAD_TOKEN_REQUESTS, group=names.UPLOAD_GROUP),
                                       body=body)
        except KubeError as error:
            raise Failed(f"cannot get an upload token: {error}") from None
        token = (((answer or {}).get("status") or {}).get("token")) or ""
        if not token:
            raise Failed("cannot get an upload token: the UploadTokenRequest came back without status.token")
        return str(token)

    def _proxy_url(self) -> str:
        if self.args.uploadproxy_url:
            return str(self.args.uploadproxy_url)
        config = self.kube.get(self._path(names.CDICONFIGS, names.CDICONFIG_NAME, group=names.GROUP,
                                          namespaced=False)) or {}
        url = (config.get("spec") or {}).get("uploadProxyURLOverride") or (config.get("status") or {}).get(
            "uploadProxyURL")
        if not url:
            raise Failed("uploadproxy URL not found: give --uploadproxy-url")
        return str(url)

    # 4. processing

    def _wait_processed(self) -> None:
        def done() -> bool:
            pvc = self._pvc()
            notes = annotations(pvc or {})
            if notes.get(names.ANN_FATAL_ERROR) == "true":
                raise Failed(f"processing failed: {notes.get(names.ANN_RUNNING_CONDITION_MESSAGE, '')}")
            return notes.get(names.ANN_POD_PHASE) == names.SUCCEEDED
        self._poll(done, timeout=PROCESSING_TIMEOUT, timeout_message="Timed out waiting for post upload processing to "
                   "complete, please check upload pod status for progress")

    @staticmethod
    def _poll(check: Callable[[], bool], *, timeout: float, timeout_message: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise Failed(timeout_message)
            time.sleep(POLL)


def _running_message(dv: Obj) -> str:
    running = next((c for c in (dv.get("status") or {}).get("conditions") or [] if c.get("type") == "Running"), {})
    return str(running.get("message") or running.get("reason") or (dv.get("status") or {}).get("phase"))

