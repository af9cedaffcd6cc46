"""ingest.testbed.signals: a signal that ends a process unwinds it, and a signal that arrives
while a child is being started waits until the child is recorded for teardown.

The window this closes: a SIGTERM after Popen has exec'd versitygw but before the server object
holds it raised SystemExit there, and the killed benchmark left its versitygw running (a clean
clone's suite, tests/test_bench_smoke.py::test_a_killed_benchmark_stops_its_server). Each case
runs in a child Python, since the handlers are process-wide."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.proctools import processes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.mark.parametrize("sig,status", [("SIGTERM", 128 + signal.SIGTERM), ("SIGHUP", 128 + signal.SIGHUP)])
def test_a_held_signal_is_raised_as_the_outermost_block_ends(sig, status):
    done = _python(f"""
        import os, signal, time
        from ingest.testbed.signals import signals_held, unwind_on_signals
        unwind_on_signals()
        try:
            with signals_held():
                with signals_held():
                    os.kill(os.getpid(), signal.{sig})
                    time.sleep(0.2)  # the handler runs here, and must not raise yet
                    print("inner end", flush=True)
                print("outer body", flush=True)
        finally:
            print("unwound", flush=True)
        print("after the block", flush=True)
    """)
    assert done.returncode == status, done.stderr
    assert done.stdout.split("\n")[:3] == ["inner end", "outer body", "unwound"], done.stdout
    assert "after the block" not in done.stdout


def test_a_held_interrupt_is_a_keyboard_interrupt_and_outranks_the_blocks_error():
    done = _python("""
        import os, signal, time
        from ingest.testbed.signals import signals_held, unwind_on_signals
        unwind_on_signals()
        try:
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
                raise ValueError("the block's own error")
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
        with signals_held():
            pass
        print("nothing left held", flush=True)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["KeyboardInterrupt", "nothing", "left", "held"], done.stdout


def test_outside_the_main_thread_nothing_is_held():
    done = _python("""
        import threading
        from ingest.testbed import signals
        seen = []
        def body():
            with signals.signals_held():
                seen.append(signals._held_depth)
        t = threading.Thread(target=body); t.start(); t.join()
        print(seen)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0]"


# Where the SIGTERM lands in LocalS3Server.start(): just after Popen returns (inside the held
# block), or while it waits for the server to answer (after the block).
WHERE = {
    "after Popen": """
        real = localserver.subprocess.Popen
        def popen(*args, **kwargs):
            proc = real(*args, **kwargs)
            print(proc.pid, args[0][-1], flush=True)  # versitygw's pid and its root dir
            os.kill(os.getpid(), signal.SIGTERM)
            return proc
        localserver.subprocess.Popen = popen
    """,
    "while it waits": """
        def wait_ready(self):
            print(self._proc.pid, self.root, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        localserver.LocalS3Server._wait_ready = wait_ready
    """,
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", list(WHERE))
def test_a_kill_while_versitygw_starts_stops_it(where):
    head = """
        import os, signal, time
        from ingest.testbed import localserver
        from ingest.testbed.signals import unwind_on_signals
        unwind_on_signals()
    """
    start = "localserver.LocalS3Server().start()\n"
    done = _python(textwrap.dedent(head) + textwrap.dedent(WHERE[where]) + start)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    pid, root = done.stdout.split()
    assert int(pid) not in processes("versitygw"), f"{where}: the killed start left versitygw {pid} running"
    assert not os.path.exists(root), f"{where}: the killed start left the server's root {root}"
