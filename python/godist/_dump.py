"""GODIST_DUMP_ON_SIGNAL: every godist group of the process logs its state
(the snapshot of godist.dump_state()) when the process gets a signal, even
while a collective is stuck."""

from __future__ import annotations

import os
import signal

from . import _errors


_SIGNALS_ASKED = set()


def on_signal(lib) -> None:
    """GODIST_DUMP_ON_SIGNAL: "1" (SIGUSR1) or a signal's name or number."""
    v = os.environ.get("GODIST_DUMP_ON_SIGNAL", "").strip().upper()
    if not v or v in ("0", "FALSE", "NO", "OFF"):
        return
    if v in ("1", "TRUE", "YES", "ON"):
        v = "SIGUSR1"
    try:
        signo = int(v) if v.isdigit() else int(getattr(signal, v if v.startswith("SIG") else "SIG" + v))
    except (AttributeError, ValueError):
        raise ValueError(f"godist: GODIST_DUMP_ON_SIGNAL={os.environ['GODIST_DUMP_ON_SIGNAL']!r}: use 1 (SIGUSR1) "
                         "or a signal's name or number") from None
    if signo in _SIGNALS_ASKED:
        return
    if lib.dump_on_signal(signo) != _errors.OK:
        raise ValueError(f"godist: GODIST_DUMP_ON_SIGNAL: signal {signo} cannot be caught")
    _SIGNALS_ASKED.add(signo)
