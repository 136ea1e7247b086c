"""NativeLock: a re-entrant lock that, at exit, waits for the thread inside the native library
and then lets no other thread in (an error instead of a wait that never ends)."""

from __future__ import annotations

import threading
import time

import pytest

from tessera.errors import CompileError
from tessera.plugin.native_lock import NativeLock


def test_serialises_and_is_reentrant() -> None:
    lock = NativeLock("lib")
    inside: list[int] = []
    most = 0

    def work() -> None:
        nonlocal most
        for _ in range(50):
            with lock, lock:  # re-entrant
                inside.append(1)
                most = max(most, len(inside))
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1 and not lock.closed


def test_close_waits_for_the_holder_then_keeps_the_lock() -> None:
    lock = NativeLock("FakeLLVM")
    entered, leave, left = threading.Event(), threading.Event(), threading.Event()
    later: list[BaseException] = []

    def holder() -> None:
        with lock:
            entered.set()
            leave.wait(10)
            time.sleep(0.05)
        left.set()

    def newcomer() -> None:
        try:
            with lock:
                pass
        except CompileError as e:
            later.append(e)

    t = threading.Thread(target=holder)
    t.start()
    assert entered.wait(10)
    closer = threading.Thread(target=lock.close)
    closer.start()
    time.sleep(0.05)
    assert closer.is_alive()  # waiting for the holder
    leave.set()
    closer.join(10)
    assert not closer.is_alive() and left.is_set() and lock.closed
    t.join()
    n = threading.Thread(target=newcomer)
    n.start()
    n.join(10)
    assert not n.is_alive()  # refused, not left waiting
    assert len(later) == 1 and "FakeLLVM: the process is exiting" in str(later[0])
    lock.close()  # idempotent


def test_a_holder_cannot_reenter_once_closing() -> None:
    """The holder's next nested entry fails, so a long sequence of calls stops early."""
    lock = NativeLock("lib")
    entered, closing = threading.Event(), threading.Event()
    seen: list[BaseException] = []

    def holder() -> None:
        with lock:
            entered.set()
            closing.wait(10)
            while not lock.closed:
                time.sleep(0.001)
            try:
                with lock:
                    pass
            except CompileError as e:
                seen.append(e)

    t = threading.Thread(target=holder)
    t.start()
    assert entered.wait(10)
    closer = threading.Thread(target=lock.close)
    closer.start()
    closing.set()
    closer.join(10)
    t.join(10)
    assert not closer.is_alive() and len(seen) == 1


def test_the_guard_thread_itself_may_still_use_it() -> None:
    lock = NativeLock("lib")
    lock.close()
    with lock:  # the thread that closed it holds it
        pass
    with pytest.raises(CompileError, match="exiting"):
        result: list[BaseException] = []

        def other() -> None:
            try:
                lock.acquire()
            except CompileError as e:
                result.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join(10)
        raise result[0]
