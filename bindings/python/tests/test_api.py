"""The module surface: every C function is reachable, versions, statuses."""
import re

import lctx
from lctx import capi


def test_every_header_function_is_wrapped(header_text):
    names = re.findall(r"LCTX_API\s+(?:LCTX_NODISCARD\s+)?[\w\s\*]+?\b(lctx_\w+)\s*\(", header_text)
    assert len(names) > 40
    missing = [n for n in names if not callable(getattr(capi, n, None))]
    assert not missing, f"C functions not reachable from Python: {missing}"


def test_version_matches_header(header_text):
    parts = [re.search(rf"#define LCTX_VERSION_{k}\s+(\d+)", header_text).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    assert lctx.version() == ".".join(parts)
    assert capi.lctx_version_number() == int(parts[0]) * 10000 + int(parts[1]) * 100 + int(parts[2])
    assert lctx.build_info()


def test_enums_match_header(header_text):
    for name, value in re.findall(r"\b(LCTX_(?:ERR|METHOD|STAGE|LOG)_\w+)\s*=\s*(-?\d+)", header_text):
        assert getattr(capi, name) == int(value), name
    assert lctx.Status.CANCELLED == -8 and lctx.Method.FULL == 0 and lctx.Stage.DECODING == 3


def test_status_strings():
    for st in lctx.Status:
        assert lctx.status_string(st)
    assert lctx.status_string(-999)  # unknown codes still give text


def test_exception_hierarchy():
    assert issubclass(lctx.InvalidArgumentError, lctx.Error)
    assert issubclass(lctx.InvalidArgumentError, ValueError)
    for cls in (lctx.IoError, lctx.FormatError, lctx.UnsupportedError, lctx.StateError, lctx.CancelledError,
                lctx.ContextFullError, lctx.InternalError, lctx.OutOfMemoryError, lctx.BufferTooSmallError):
        assert issubclass(cls, lctx.Error)


def test_default_params_are_initialised():
    p = capi.lctx_session_params()
    capi.lctx_session_default_params(p)
    assert p.struct_size > 0 and p.method == capi.LCTX_METHOD_REFORM  # the library default
    s = capi.lctx_sampling_params()
    capi.lctx_sampling_default_params(s)
    assert s.temperature <= 0 and s.struct_size > 0
