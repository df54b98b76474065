"""`cdi-importer`: the importer pod's entry point, speaking CDI's env contract and termination message."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

from importer import contract as c
from importer.errors import ImportFailed, Reason
from importer.pipeline import run_import
from importer.process import without_teardown
from importer.progress import Progress, Snapshot, Throttled
from importer.request import from_env

log = logging.getLogger("cdi-importer")

METRIC_DELAY = 1.0  # seconds into the import


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    env = dict(os.environ)
    termination = Path(env.get(c.TERMINATION_LOG, "") or c.DEFAULT_TERMINATION_LOG)
    source = env.get(c.SOURCE, "") or c.SOURCE_HTTP
    try:
        request = from_env(env)
        progress = Progress([Throttled(_log_progress, seconds=5.0)])
        metric = _metric_later(progress, env)
        try:
            result = run_import(request, progress=progress)
        finally:
            if metric is not None:
                metric.cancel()  # if not started yet: the import is over
    except ImportFailed as failure:
        log.error("%s", failure)
        return _failed(termination, failure, source=source)
    except Exception as error:  # a bug: still one line in the termination message, and a traceback in the log
        log.exception("import failed")
        return _failed(termination, ImportFailed(Reason.InternalError, f"{type(error).__name__}: {error}"),
                       source=source)
    done = c.success_message(preallocation_applied=result.preallocation_applied, labels=result.labels,
                             scratch_key=source != c.SOURCE_NONE)
    c.write_termination(termination, done)
    log.info("import complete: %s %s bytes into %s", result.format, result.virtual_size, result.target)
    return 0


def _metric_later(progress: Progress, env: dict[str, str]) -> threading.Timer | None:
    """The metric server, started beside the import once it has run for a while: the controller scrapes every
    2 s, so an import over sooner loses nothing by having no metric, and saves starting its server (5 ms of the
    GIL the import's threads need, and an openssl process for the certificate).
    """
    port = int(env.get(c.METRICS_PORT, "") or c.DEFAULT_METRICS_PORT)
    if not port:
        return None
    metric = threading.Timer(METRIC_DELAY, _serve_metric, args=(progress, env, port))
    metric.name, metric.daemon = "metrics", True
    metric.start()
    return metric


def _serve_metric(progress: Progress, env: dict[str, str], port: int) -> None:
    """CDI's progress metric for the controller to scrape; without it the import still runs, unobserved."""
    from importer.metrics import serve_progress  # noqa: PLC0415 - see the caller

    metric = serve_progress(env.get(c.OWNER_UID, ""), port=port,
                            addr=env.get(c.METRICS_ADDRESS) or "0.0.0.0")  # noqa: S104 - the controller scrapes the pod IP
    if metric is not None:
        progress.add_listener(metric)


def _failed(termination: Path, failure: ImportFailed, *, source: str) -> int:
    code, message = c.failure_exit(failure, source=source)
    c.write_termination(termination, message)
    return code


def _log_progress(snapshot: Snapshot) -> None:
    log.info("%s %.2f%% (%d bytes)", snapshot.phase, snapshot.percent, snapshot.done_bytes)


run = without_teardown(main)


if __name__ == "__main__":
    run()
