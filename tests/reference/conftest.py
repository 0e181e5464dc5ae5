"""Shared fixtures of the reference tests: where the build and the models are."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LCTX_BUILD_DIR", ROOT / "build" / "release"))
MODELS = pathlib.Path(os.environ.get("LCTX_MODELS_DIR", ROOT / "models"))
SMOLLM2 = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
STORIES = ROOT / "tests" / "data" / "stories260K.gguf"
GEMMA3 = MODELS / "gemma-3-270m-q4_k_m.gguf"


def need_file(path: pathlib.Path, what: str) -> pathlib.Path:
    if not path.exists():
        pytest.skip(f"{what} not found at {path}")
    return path


def build_tool(name: str) -> pathlib.Path:
    """A test program of the build (tests/NAME); skipped when not built."""
    return need_file(BUILD / "tests" / name, f"{name} (build it; set LCTX_BUILD_DIR)")


def need_model(path: pathlib.Path, hint: str) -> pathlib.Path:
    """A missing model fails the test (never a skip)."""
    if not path.exists():
        pytest.fail(f"model missing: {path} ({hint})", pytrace=False)
    return path


@pytest.fixture(scope="session")
def lctx_cli() -> pathlib.Path:
    return need_file(BUILD / "tools" / "lctx", "the lctx CLI (build first)")


@pytest.fixture(scope="session")
def smollm2() -> pathlib.Path:
    return need_model(SMOLLM2, "run scripts/fetch-models.sh")


@pytest.fixture(scope="session")
def stories() -> pathlib.Path:
    return need_model(STORIES, "committed under tests/data/")


def need_gemma3(path: pathlib.Path = GEMMA3) -> pathlib.Path:
    """Gemma 3 270M: a missing file fails the test under CI=true (where
    scripts/fetch-models.sh has run) and skips it elsewhere."""
    if not path.exists():
        msg = f"Gemma 3 model missing: {path} (run scripts/fetch-models.sh)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def gemma3() -> pathlib.Path:
    return need_gemma3()
