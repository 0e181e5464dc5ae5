"""Finds the built package (LCTX_BUILD_DIR/bindings/python, default
build/release) and the tiny real model stories260K."""
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("LCTX_BUILD_DIR", ROOT / "build" / "release"))
if (BUILD / "bindings" / "python" / "lctx").is_dir():
    sys.path.insert(0, str(BUILD / "bindings" / "python"))

TINY = pathlib.Path(os.environ.get("LCTX_TINY_MODEL", ROOT / "tests" / "data" / "stories260K.gguf"))


@pytest.fixture(scope="session")
def tiny_path() -> pathlib.Path:
    if not TINY.is_file():  # a missing model fails, never skips
        pytest.fail(f"test model missing: {TINY} (stories260K.gguf is committed under tests/data/)", pytrace=False)
    return TINY


@pytest.fixture(scope="session")
def model(tiny_path):
    import lctx
    m = lctx.Model(tiny_path, n_threads=1)
    yield m
    m.close()


@pytest.fixture(scope="session")
def header_text() -> str:
    return (ROOT / "include" / "lctx.h").read_text()
