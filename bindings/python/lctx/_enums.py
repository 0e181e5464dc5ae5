"""The C enums as Python IntEnums (values read from the extension module),
and the library's method registry."""
from enum import IntEnum
from typing import List, NamedTuple

from . import capi


def _enum(name: str, prefix: str) -> type:
    # Members in the header's order (by |value|: statuses count down from -1).
    members = sorted(((k[len(prefix):], getattr(capi, k)) for k in dir(capi) if k.startswith(prefix)),
                     key=lambda kv: abs(kv[1]))
    return IntEnum(name, members, module=__name__)


Method = _enum("Method", "LCTX_METHOD_")
Stage = _enum("Stage", "LCTX_STAGE_")
LogLevel = _enum("LogLevel", "LCTX_LOG_")
Status = _enum("Status", "LCTX_ERR_")
RefreshKVSchedule = _enum("RefreshKVSchedule", "LCTX_REFRESHKV_")  # refreshkv_schedule=


class MethodInfo(NamedTuple):
    """One row of the library's method registry (lctx_method_*)."""
    method: Method
    name: str
    description: str
    implemented: bool


def methods() -> List[MethodInfo]:
    """Every method the native library knows, in value order."""
    out = []
    for v in range(capi.lctx_method_count()):
        out.append(MethodInfo(Method(v), capi.lctx_method_name(v), capi.lctx_method_description(v),
                              bool(capi.lctx_method_is_implemented(v))))
    return out


def method_from_name(name: str) -> Method:
    """The Method of a registry name ("reform", any case); lctx.InvalidArgumentError if unknown."""
    return Method(capi.lctx_method_from_name(name))
