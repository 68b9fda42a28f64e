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


def test_a_sigterm_that_a_library_turned_into_ctrl_c_keeps_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    # DuckDB reports a SIGTERM as its own interrupt; query re-raises a plain KeyboardInterrupt and click
    # wraps it in Abort: the signal recorded on arrival gives 143, not Ctrl-C's 130
    from tracekit import cli

    cli._RECEIVED[:] = [signal.SIGTERM]
    try:
        assert cli.interrupted_exit(KeyboardInterrupt()) == 128 + signal.SIGTERM
    finally:
        cli._RECEIVED.clear()
    assert cli.interrupted_exit(KeyboardInterrupt()) == 130
    assert "interrupted (SIGTERM)" in capsys.readouterr().err


def test_an_interrupt_python_wrapped_is_found() -> None:
    from tracekit.cli import interrupt_in

    try:
        try:
            raise Terminated(signal.SIGTERM)
        except Terminated as t:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from t
    except RuntimeError as wrapped:
        found = interrupt_in(wrapped)
    assert isinstance(found, Terminated) and found.signum == signal.SIGTERM
    assert interrupt_in(ValueError("x")) is None
