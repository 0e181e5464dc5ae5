"""One gguf.GGUFReader per model file for the whole test run. gguf-py parses
a file's metadata element by element, which takes seconds for a real model
(Gemma 3's 262,144-entry vocabulary: about 17 s; SmolLM2's: about 5 s), and
several tests and references read the same file. A file rewritten in place
(same path, new size or modification time) gets a fresh reader."""
from __future__ import annotations

import functools
import os

import gguf


@functools.lru_cache(maxsize=None)
def _cached(path: str, mtime_ns: int, size: int) -> gguf.GGUFReader:
    return gguf.GGUFReader(path)


def reader(path) -> gguf.GGUFReader:
    """The shared read-only reader of the GGUF file at path."""
    real = os.path.realpath(str(path))
    st = os.stat(real)
    return _cached(real, st.st_mtime_ns, st.st_size)
