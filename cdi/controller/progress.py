"""Import and upload progress, scraped from the worker pod's metrics endpoint as CDI's controller scrapes importers
(cdi-facts §3.9).

The only polled thing in the controller: a metric cannot be watched. The endpoint is HTTPS with a certificate
the pod made up at start, so it is not verified; the value is only ever shown, never trusted for decisions.
"""

from __future__ import annotations

import http.client
import re
import ssl
from urllib.parse import urlsplit

from cdi.api import names
from cdi.api.spec import Obj
from importer.contract import OWNER_UID, PROGRESS_METRIC

SCRAPE_TIMEOUT = 2.0

# One context for every scrape: a default one loads the system's CA bundle, about 20 ms of CPU each time, for
# a certificate that is not verified anyway.
_UNVERIFIED = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
_UNVERIFIED.check_hostname = False
_UNVERIFIED.verify_mode = ssl.CERT_NONE


def parse_progress(metrics_text: str, *, owner_uid: str) -> str | None:
    """``"45.30%"`` from the Prometheus text of an importer, or None when it has no value for ``owner_uid``."""
    pattern = re.compile(rf'{PROGRESS_METRIC}\{{ownerUID="{re.escape(owner_uid)}"\}} (\d{{1,3}}\.?\d*)')
    match = pattern.search(metrics_text)
    return f"{float(match[1]):.2f}%" if match else None


def progress_news(scraped: str | None, *, shown: str | None) -> str | None:
    """What a scrape changes in the progress shown so far (None: nothing). Until something has moved, a worker's
    0.00% is no news: an upload server serves its metric from the start, and its DataVolume stays at N/A until
    bytes arrive, as CDI's does, instead of flipping to 0.00% at whatever moment a scrape happens to come."""
    if scraped is None or scraped == shown or (shown is None and float(scraped.rstrip("%")) == 0):
        return None
    return scraped


def metrics_url(pod: Obj) -> str | None:
    """Where a running importer pod serves its metrics; None before it runs or without a pod IP."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or not status.get("podIP"):
        return None
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == names.METRICS_PORT_NAME:
                host = status["podIP"]
                host = f"[{host}]" if ":" in host else host
                return f"https://{host}:{port['containerPort']}/metrics"
    return None


def owner_uid(pod: Obj) -> str:
    """The ownerUID the importer labels its progress with: what its pod's env says."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for var in container.get("env") or []:
            if var.get("name") == OWNER_UID:
                return str(var.get("value") or "")
    return ""


def scrape_progress(pod: Obj, *, owner_uid: str, timeout: float = SCRAPE_TIMEOUT) -> str | None:
    """The pod's progress, or None if it cannot be read now (not running, refused, timed out)."""
    url = metrics_url(pod)
    if url is None:
        return None
    parts = urlsplit(url)
    connection = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout,
                                             context=_UNVERIFIED)
    try:
        connection.request("GET", parts.path)
        response = connection.getresponse()
        if response.status != 200:
            return None
        text = response.read().decode(errors="replace")
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    return parse_progress(text, owner_uid=owner_uid)
