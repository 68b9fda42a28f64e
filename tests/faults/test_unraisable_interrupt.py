"""A Ctrl-C that lands where Python can only ignore an exception (an import-lock or weakref callback)
interrupts the verb at the next safe point instead of being printed as "Exception ignored"."""

from __future__ import annotations

import signal
import time
from types import SimpleNamespace

import pytest

from tracekit.cli import Terminated, redeliver_interrupt


def _spin() -> None:
    for _ in range(1000):
        time.sleep(0.001)


def test_an_ignored_ctrl_c_is_delivered_again() -> None:
    seen: list[object] = []
    redeliver_interrupt(SimpleNamespace(exc_type=ValueError, exc_value=ValueError("x")), seen.append)
    assert len(seen) == 1  # anything else goes to the hook that was there
    with pytest.raises(KeyboardInterrupt):
        redeliver_interrupt(SimpleNamespace(exc_type=KeyboardInterrupt, exc_value=KeyboardInterrupt()), seen.append)
        _spin()
    assert len(seen) == 1


def test_an_ignored_sigterm_is_delivered_as_sigterm() -> None:
    def raise_terminated(signum: int, frame: object) -> None:
        raise Terminated(signum)

    old = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        with pytest.raises(Terminated) as got:
            redeliver_interrupt(SimpleNamespace(exc_type=Terminated, exc_value=Terminated(signal.SIGTERM)))
            _spin()
        assert got.value.signum == signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, old)
