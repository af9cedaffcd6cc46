"""A signal that ends a process unwinds it, so what the process built comes down.

A test bed's servers run in sessions of their own (a Ctrl-C meant for a client must not kill
the store under a run), and network namespaces outlive every process, so a process that built
them must not die at a signal's default action: that leaves a versitygw, a Toxiproxy and an
emulated cluster's namespaces behind. SIGTERM (kill, a batch job's time limit) and SIGHUP (its
terminal gone) become SystemExit(128 + signal), which runs every `with` block's teardown on the
way out, and the exit status is still the signal's.
"""
from __future__ import annotations

import signal
import threading

UNWIND_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _exit(signum, frame):
    raise SystemExit(128 + signum)


def unwind_on_signals(signals=UNWIND_SIGNALS) -> None:
    """Make `signals` raise SystemExit in the main thread (the only one Python delivers them to;
    from another thread this does nothing). SIGINT raises KeyboardInterrupt unless listed, also
    where a shell started the process in the background with SIGINT ignored: Ctrl-C or
    kill -INT must always reach the teardown."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in signals:
        signal.signal(sig, _exit)
