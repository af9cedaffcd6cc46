"""A signal that ends a process unwinds it, so what the process built comes down.

A test bed's servers run in sessions of their own (a Ctrl-C meant for a client must not kill
the store under a run), and network namespaces outlive every process, so a process that built
them must not die at a signal's default action: that leaves a versitygw, a Toxiproxy and an
emulated cluster's namespaces behind. SIGTERM (kill, a batch job's time limit) and SIGHUP (its
terminal gone) become SystemExit(128 + signal), which runs every `with` block's teardown on the
way out, and the exit status is still the signal's.
"""
from __future__ import annotations

import contextlib
import signal
import threading

UNWIND_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

# What signals arriving inside signals_held() would have raised, in order; the first is raised as
# the outermost signals_held() block ends.
_held_depth = 0
_held_raises: list[BaseException] = []


def _deliver(exc: BaseException) -> None:
    if _held_depth:
        _held_raises.append(exc)
        return
    raise exc


def _exit(signum, frame):
    _deliver(SystemExit(128 + signum))


def _interrupt(signum, frame):
    _deliver(KeyboardInterrupt())


@contextlib.contextmanager
def signals_held():
    """Within the block, a signal unwind_on_signals handles waits until the block ends. A child is
    started and recorded for teardown in one held block: a SystemExit between the two (inside
    Popen after the child's exec, or before the line that records it) would leave the child
    running in its own session, owned by nobody. Python runs handlers in the main thread only,
    so in another thread this holds nothing."""
    global _held_depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held_depth += 1
    try:
        yield
    finally:
        _held_depth -= 1
        # Raised here even when the block failed: the signal's exit outranks the block's error.
        if not _held_depth and _held_raises:
            exc = _held_raises[0]
            _held_raises.clear()
            raise exc


def unwind_on_signals(signals=UNWIND_SIGNALS) -> None:
    """Make `signals` raise SystemExit in the main thread (the only one Python delivers them to;
    from another thread this does nothing). SIGINT raises KeyboardInterrupt unless listed, also
    where a shell started the process in the background with SIGINT ignored: Ctrl-C or
    kill -INT must always reach the teardown."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, _interrupt)
    for sig in signals:
        signal.signal(sig, _exit)
