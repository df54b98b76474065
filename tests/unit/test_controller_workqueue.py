"""The controller's work queue (bursts coalesce, one key is never worked on twice at once, failures come back)
and what it remembers between reconciles (cluster config for a moment, the versions a reconcile saw, the newest
version of each watched object)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cdi.controller import memory, workqueue
from cdi.controller.memory import Latest, Recent, Seen
from cdi.controller.workqueue import WorkQueue


async def _drain(queue: WorkQueue[str], work, *, workers: int = 4, until) -> None:
    with ThreadPoolExecutor(workers) as executor:
        serving = asyncio.ensure_future(queue.serve(work, workers=workers, executor=executor))
        deadline = time.monotonic() + 10
        while not until() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


def test_a_burst_for_one_key_is_one_piece_of_work():
    calls: list[str] = []

    async def main() -> None:
        queue: WorkQueue[str] = WorkQueue()
        for key in ("dv-a", "dv-a", "dv-b", "dv-a"):
            queue.add(key)
        await _drain(queue, calls.append, until=lambda: len(calls) >= 2)

    asyncio.run(main())
    assert sorted(calls) == ["dv-a", "dv-b"]


def test_a_key_added_while_worked_on_is_worked_on_again_afterwards_never_at_the_same_time():
    active: set[str] = set()
    overlaps: list[str] = []
    calls: list[str] = []
    lock = threading.Lock()
    started = threading.Event()

    def work(key: str) -> None:
        with lock:
            if key in active:
                overlaps.append(key)
            active.add(key)
        started.set()
        time.sleep(0.1)
        with lock:
            active.discard(key)
            calls.append(key)

    async def main() -> None:
        queue: WorkQueue[str] = WorkQueue()
        queue.add("dv-a")

        async def add_while_busy() -> None:
            await asyncio.to_thread(started.wait)
            queue.add("dv-a")
            queue.add("dv-a")

        adding = asyncio.ensure_future(add_while_busy())
        await _drain(queue, work, until=lambda: len(calls) >= 2)
        await adding

    asyncio.run(main())
    assert calls == ["dv-a", "dv-a"] and overlaps == []


def test_failed_work_comes_back_after_a_growing_delay(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(workqueue, "RETRY_FIRST", 0.05)
    attempts: list[float] = []

    def flaky(key: str) -> None:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise RuntimeError("the API server is restarting")

    async def main() -> None:
        queue: WorkQueue[str] = WorkQueue()
        queue.add("dv-a")
        await _drain(queue, flaky, until=lambda: len(attempts) >= 3)

    asyncio.run(main())
    assert len(attempts) == 3
    first, second = attempts[1] - attempts[0], attempts[2] - attempts[1]
    assert first >= 0.05 and second >= 0.1


def test_recent_values_are_fetched_once_per_ttl_and_forgotten_on_demand():
    clock = [100.0]
    fetched: list[int] = []

    def fetch() -> int:
        fetched.append(1)
        return len(fetched)

    recent = Recent(1.0, clock=lambda: clock[0])
    assert recent.get("config", fetch) == 1
    clock[0] += 0.5
    assert recent.get("config", fetch) == 1
    clock[0] += 0.6
    assert recent.get("config", fetch) == 2
    recent.forget()
    assert recent.get("config", fetch) == 3


def test_a_value_fetched_across_a_forget_is_not_kept():
    recent = Recent(10.0)

    def fetch_while_it_changes() -> str:
        recent.forget()  # the watch says it changed while this read was on its way
        return "before the change"

    assert recent.get("config", fetch_while_it_changes) == "before the change"
    assert recent.get("config", lambda: "after") == "after"


def obj(uid: str, version: str) -> dict:
    return {"metadata": {"uid": uid, "resourceVersion": version}}


def test_only_versions_no_reconcile_has_seen_are_news():
    seen = Seen()
    seen.record(obj("dv", "7"), None, obj("pvc", "9"))
    assert not seen.is_news("MODIFIED", obj("dv", "7"))  # the echo of our status patch
    assert seen.is_news("MODIFIED", obj("dv", "8"))  # someone else's write
    assert seen.is_news("ADDED", obj("pod", "3"))
    assert seen.is_news("DELETED", obj("pvc", "10"))
    assert seen.is_news("MODIFIED", obj("pvc", "9"))  # a deleted object's versions are forgotten


def named(name: str, version: str, *, kind: str = "Pod", phase: str = "") -> dict:
    return {"kind": kind, "metadata": {"namespace": "ns", "name": name, "resourceVersion": version},
            "status": {"phase": phase}}


def test_the_latest_version_of_an_object_is_kept_from_watch_events_and_own_writes():
    latest = Latest()
    assert latest.get("Pod", "ns", "p") is None  # a miss: the caller asks the API server
    latest.saw("ADDED", named("p", "5", phase="Pending"))
    latest.wrote(named("p", "9", phase="Running"))  # our write's answer, before its echo
    latest.saw("MODIFIED", named("p", "7", phase="Pending"))  # an older event, late: kept out
    assert latest.get("Pod", "ns", "p")["status"]["phase"] == "Running"
    latest.saw("MODIFIED", named("p", "9", phase="Running"))
    latest.saw("MODIFIED", named("p", "12", phase="Succeeded"))
    assert latest.get("Pod", "ns", "p")["status"]["phase"] == "Succeeded"
    assert latest.get("PersistentVolumeClaim", "ns", "p") is None  # kinds apart


def test_only_watch_events_bring_an_object_in():
    latest = Latest()
    latest.wrote(named("p", "3"))  # created, not delivered yet: it may be deleted before its event
    assert latest.get("Pod", "ns", "p") is None
    latest.saw("ADDED", named("p", "3"))
    latest.saw("DELETED", named("p", "4"))
    latest.wrote(named("p", "4"))  # a write that raced the deletion does not bring it back
    assert latest.get("Pod", "ns", "p") is None


def test_absence_is_remembered_until_the_object_is_seen_or_written():
    latest = Latest()
    assert not latest.absent("Pod", "ns", "p")  # never heard of: the caller asks the API server
    latest.fetched("Pod", "ns", "p", None)  # a GET found nothing
    assert latest.absent("Pod", "ns", "p") and not latest.absent("PersistentVolumeClaim", "ns", "p")
    latest.saw("ADDED", named("p", "3"))
    assert not latest.absent("Pod", "ns", "p") and latest.get("Pod", "ns", "p") is not None
    latest.fetched("Pod", "ns", "p", None)  # a GET sent before the event it answered after: the event wins
    assert not latest.absent("Pod", "ns", "p")
    latest.saw("DELETED", named("p", "4"))
    assert latest.absent("Pod", "ns", "p") and latest.get("Pod", "ns", "p") is None
    latest.wrote(named("p", "5"))  # made again by us: no longer known absent, not known either
    assert not latest.absent("Pod", "ns", "p") and latest.get("Pod", "ns", "p") is None
    latest.fetched("Pod", "ns", "q", None)
    latest.fetched("Pod", "ns", "q", named("q", "1"))  # found by a later GET (a user's, unwatched)
    assert not latest.absent("Pod", "ns", "q")


def test_absences_are_bounded(monkeypatch):
    monkeypatch.setattr(memory, "ABSENT_KEPT", 3)
    latest = Latest()
    for name in "abcd":
        latest.fetched("Pod", "ns", name, None)
    assert [latest.absent("Pod", "ns", n) for n in "abcd"] == [False, True, True, True]  # the oldest forgotten
