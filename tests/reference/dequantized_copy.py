"""Writes an F32 copy of a GGUF model: same metadata, every tensor
dequantized with the `gguf` package. llama.cpp then computes in plain f32
(no 8-bit activation quantization), like lctx, so greedy outputs can be
compared token for token."""
from __future__ import annotations

import sys

import numpy as np
import gguf

import gguf_readers


def write_f32_copy(src: str, dst: str) -> str:
    r = gguf_readers.reader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name == "general.file_type":
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(x) for x in reversed(t.shape)]  # numpy order: rows first
        w.add_tensor(t.name, data.reshape(shape), raw_dtype=gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


if __name__ == "__main__":
    write_f32_copy(sys.argv[1], sys.argv[2])
