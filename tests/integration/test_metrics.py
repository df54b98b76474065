"""CDI's progress metric, scraped the way CDI's controller does: HTTPS, self-signed, /metrics, regex on ownerUID."""

import re
import socket

import requests
import urllib3

from importer.metrics import ProgressMetric
from importer.progress import Progress


def _served(owner_uid: str) -> tuple[ProgressMetric, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metric = ProgressMetric(owner_uid)
    metric.serve(port, addr="127.0.0.1")
    return metric, port


def test_progress_metric_is_served_over_https_and_never_decreases():
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    metric, port = _served("0d2c5b7e-uid")
    progress = Progress([metric], min_interval=0)
    pattern = re.compile(r'kubevirt_cdi_import_progress_total\{ownerUID="0d2c5b7e-uid"\} (\d{1,3}\.?\d*)')

    def scrape() -> float:
        body = requests.get(f"https://127.0.0.1:{port}/metrics", verify=False, timeout=5).text
        match = pattern.search(body)
        assert match, body
        return float(match[1])

    progress.transferred(45, 100)
    assert 44.9 < scrape() < 45.1
    progress.converting(10.0)  # behind the download: the metric holds
    assert 44.9 < scrape() < 45.1
    progress.complete()
    assert scrape() == 100.0


def test_a_client_that_never_says_hello_does_not_stop_the_scrapes():
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    metric, port = _served("uid-9")
    Progress([metric], min_interval=0).transferred(7, 10)
    with socket.create_connection(("127.0.0.1", port)):  # connected, silent: no TLS hello
        answer = requests.get(f"https://127.0.0.1:{port}/metrics", verify=False, timeout=5)
        assert answer.status_code == 200 and 'kubevirt_cdi_import_progress_total{ownerUID="uid-9"} 70.0' in answer.text
        assert requests.get(f"https://127.0.0.1:{port}/other", verify=False, timeout=5).status_code == 404
