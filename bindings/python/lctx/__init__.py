"""lctx: long-context inference for small language models (Python binding).

    import lctx
    with lctx.Model("model.gguf") as model, model.session() as s:   # REFORM, the default
        chat = lctx.Conversation(s)
        chat.feed_text(open("long_document.txt").read())       # longer than the trained context is fine
        for piece in chat.ask_stream("What is it about?"):
            print(piece, end="")
        print(chat.ask("And who wrote it?"))                    # sees the first question and answer

Errors raise lctx.Error (a subclass per status, e.g. lctx.StateError) with the
library's message; ``err.status`` is the C status code and ``err.kind`` its
name in lower case ("invalid_arg", "state", ...: the LCTX_ERR_ suffix), the same in every binding.
"""
from . import capi
from ._capi import (  # exception classes are created by the extension module
    Error, InvalidArgumentError, IoError, FormatError, UnsupportedError, OutOfMemoryError, StateError,
    BufferTooSmallError, CancelledError, ContextFullError, InternalError,
)
from ._enums import LogLevel, Method, MethodInfo, RefreshKVSchedule, Stage, Status, method_from_name, methods
from ._model import Model
from ._session import STAGE_LABELS, OpTime, OpTimes, RefreshKVStats, Sampling, Selection, SelectScores, Session
from ._conversation import Conversation
from ._log import set_log_handler

__version__ = capi.lctx_version()

# The error kinds, the same names in every binding (Java Status, Go Status.Kind,
# Rust Status::kind): the status's LCTX_ERR_ suffix in lower case.
for _cls, _kind in ((InvalidArgumentError, "invalid_arg"), (IoError, "io"), (FormatError, "format"),
                    (UnsupportedError, "unsupported"), (OutOfMemoryError, "out_of_memory"), (StateError, "state"),
                    (BufferTooSmallError, "buffer_too_small"), (CancelledError, "cancelled"),
                    (ContextFullError, "context_full"), (InternalError, "internal")):
    _cls.kind = _kind
Error.kind = "error"


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
    "Model", "Session", "Conversation", "STAGE_LABELS", "Selection", "SelectScores", "Sampling", "Method", "MethodInfo", "methods", "method_from_name", "Stage",
    "Status", "LogLevel", "RefreshKVSchedule", "RefreshKVStats", "OpTime", "OpTimes",
    "set_log_handler", "version", "build_info", "status_string", "last_error", "capi",
    "Error", "InvalidArgumentError", "IoError", "FormatError", "UnsupportedError", "OutOfMemoryError",
    "StateError", "BufferTooSmallError", "CancelledError", "ContextFullError", "InternalError",
]
