"""lctx: long-context inference for small language models (Python binding).

    import lctx
    with lctx.Model("model.gguf") as model, model.session() as s:
        s.feed("a long document ...")
        for piece in s.ask_stream("What is it about?"):
            print(piece, end="")

Errors raise lctx.Error (a subclass per status, e.g. lctx.StateError) with the
library's message; ``err.status`` is the C status code.
"""
from . import capi
from ._capi import (  # exception classes are created by the extension module
    Error, InvalidArgumentError, IoError, FormatError, UnsupportedError, OutOfMemoryError, StateError,
    BufferTooSmallError, CancelledError, ContextFullError, InternalError,
)
from ._enums import LogLevel, Method, MethodInfo, RefreshKVSchedule, Stage, Status, method_from_name, methods
from ._model import Model
from ._session import RefreshKVStats, Sampling, Selection, Session
from ._log import set_log_handler

__version__ = capi.lctx_version()


def version() -> str:
    """Version of the loaded native library ("MAJOR.MINOR.PATCH")."""
    return capi.lctx_version()


def build_info() -> str:
    """Compiler and CPU variant of the native library."""
    return capi.lctx_build_info()


def status_string(status: int) -> str:
    return capi.lctx_status_string(int(status))


def last_error() -> str:
    """Message of the last failed call on this thread ("" if none)."""
    return capi.lctx_last_error()


__all__ = [
    "Model", "Session", "Selection", "Sampling", "Method", "MethodInfo", "methods", "method_from_name", "Stage",
    "Status", "LogLevel", "RefreshKVSchedule", "RefreshKVStats",
    "set_log_handler", "version", "build_info", "status_string", "last_error", "capi",
    "Error", "InvalidArgumentError", "IoError", "FormatError", "UnsupportedError", "OutOfMemoryError",
    "StateError", "BufferTooSmallError", "CancelledError", "ContextFullError", "InternalError",
]
