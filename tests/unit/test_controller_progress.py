"""Progress scraped from a real importer metrics endpoint (the importer's own ProgressMetric over HTTPS)."""

from __future__ import annotations

import socket

import pytest

from cdi.controller.importer_pod import importer_pod as importer_pod_of
from cdi.controller.progress import metrics_url, owner_uid, parse_progress, progress_news, scrape_progress
from importer.metrics import ProgressMetric
from importer.progress import Progress
from tests.unit.test_controller_importer_pod import CONFIG, HTTP, IMAGE, claim


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def importer_pod(port: int, *, phase: str = "Running", ip: str = "127.0.0.1") -> dict:
    return {"spec": {"containers": [{"name": "importer", "ports": [{"name": "metrics", "containerPort": port}]}]},
            "status": {"phase": phase, "podIP": ip}}


def test_scrapes_the_importers_metric():
    port = free_port()
    metric = ProgressMetric("dv-uid-7")
    metric.serve(port, addr="127.0.0.1")
    progress = Progress([metric], min_interval=0)
    progress.transferred(453, 1000)
    assert scrape_progress(importer_pod(port), owner_uid="dv-uid-7") == "45.30%"
    assert scrape_progress(importer_pod(port), owner_uid="another-dv") is None
    assert scrape_progress(importer_pod(port, phase="Pending"), owner_uid="dv-uid-7") is None


def test_refused_connection_is_no_progress():
    assert scrape_progress(importer_pod(free_port()), owner_uid="dv-uid-7") is None


@pytest.mark.parametrize(("text", "shown"), [
    ('kubevirt_cdi_import_progress_total{ownerUID="u"} 100.0\n', "100.00%"),
    ('kubevirt_cdi_import_progress_total{ownerUID="u"} 7\n', "7.00%"),
    ('kubevirt_cdi_import_progress_total{ownerUID="u2"} 7\n', None),
    ("# HELP nothing here\n", None),
])
def test_parse(text, shown):
    assert parse_progress(text, owner_uid="u") == shown


def test_metrics_url_needs_a_running_pod_with_an_ip():
    assert metrics_url(importer_pod(8443, ip="10.0.0.5")) == "https://10.0.0.5:8443/metrics"
    assert metrics_url(importer_pod(8443, ip="fd00::5")) == "https://[fd00::5]:8443/metrics"
    assert metrics_url(importer_pod(8443, ip="")) is None


def test_owner_uid_is_the_datavolume_the_importer_pod_labels_its_metric_with():
    pod = importer_pod_of(claim(HTTP), image=IMAGE, cdi_config_status=CONFIG)
    assert owner_uid(pod) == "dv-uid-1"
    assert owner_uid({"spec": {"containers": [{"name": "importer"}]}}) == ""


@pytest.mark.parametrize(("scraped", "shown", "news"), [
    (None, None, None),  # nothing read
    ("0.00%", None, None),  # nothing moved yet: still N/A
    ("0.01%", None, "0.01%"),
    ("45.30%", "12.00%", "45.30%"),
    ("45.30%", "45.30%", None),  # no change
    ("0.00%", "45.30%", "0.00%"),  # a new attempt after a failed one: reported (the status never shows it lower)
])
def test_progress_news(scraped, shown, news):
    assert progress_news(scraped, shown=shown) == news
