"""The C enums as Python IntEnums (values read from the extension module)."""
from enum import IntEnum

from . import capi


def _enum(name: str, prefix: str) -> type:
    members = {k[len(prefix):]: getattr(capi, k) for k in dir(capi) if k.startswith(prefix)}
    return IntEnum(name, members, module=__name__)


Method = _enum("Method", "LCTX_METHOD_")
Stage = _enum("Stage", "LCTX_STAGE_")
LogLevel = _enum("LogLevel", "LCTX_LOG_")
Status = _enum("Status", "LCTX_ERR_")
