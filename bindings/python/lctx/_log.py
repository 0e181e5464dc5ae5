"""The global log sink."""
import atexit
from typing import Callable, Optional

from . import capi
from ._enums import LogLevel


def set_log_handler(handler: Optional[Callable[[LogLevel, str], None]],
                    min_level: LogLevel = LogLevel.WARN) -> None:
    """Send library log messages to handler(level, message); None silences them.
    The handler may be called from the library's worker threads."""
    if handler is None:
        capi.lctx_log_set(None, int(min_level))
        return

    def sink(level: int, message: bytes) -> None:
        handler(LogLevel(level), message.decode("utf-8", "replace"))

    capi.lctx_log_set(sink, int(min_level))


# Worker threads must not call into an interpreter that is shutting down.
atexit.register(lambda: capi.lctx_log_set(None, int(LogLevel.ERROR)))
