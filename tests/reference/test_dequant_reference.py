"""Scalar reference dequantizers (C++, via lctx_dequant_dump) against gguf-py.

For each type: quantize random floats with gguf.quants.quantize where gguf-py
can, and also feed random blocks (random bytes whose fp16 scale fields are
overwritten with small finite values) so every bit pattern of the quants is
exercised. Dequantize with gguf.quants.dequantize and with lctx, compare.
Q8_1 and Q8_K cannot be dequantized by gguf-py: they are checked against a
numpy reference written here from the block layout.
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf import quants  # noqa: E402

import gguf_readers  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LCTX_BUILD_DIR", ROOT / "build" / "release"))
MODELS = pathlib.Path(os.environ.get("LCTX_MODELS_DIR", ROOT / "models"))
SMOLLM2 = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"

# (block size, bytes per block, byte offsets of fp16 scale fields) as in ggml.
LAYOUT = {
    T.F32: (1, 4, []),
    T.F16: (1, 2, []),
    T.BF16: (1, 2, []),
    T.Q4_0: (32, 18, [0]),
    T.Q4_1: (32, 20, [0, 2]),
    T.Q5_0: (32, 22, [0]),
    T.Q5_1: (32, 24, [0, 2]),
    T.Q8_0: (32, 34, [0]),
    T.Q8_1: (32, 36, [0, 2]),
    T.Q2_K: (256, 84, [80, 82]),
    T.Q3_K: (256, 110, [108]),
    T.Q4_K: (256, 144, [0, 2]),
    T.Q5_K: (256, 176, [0, 2]),
    T.Q6_K: (256, 210, [208]),
    T.Q8_K: (256, 292, []),
}
QUANTIZABLE = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
RANDOM_BLOCKS = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
                 T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]


@pytest.fixture(scope="module")
def dump_tool() -> pathlib.Path:
    tool = BUILD / "tests" / "lctx_dequant_dump"
    if not tool.exists():
        pytest.skip(f"lctx_dequant_dump not built at {tool} (set LCTX_BUILD_DIR)")
    return tool


def lctx_dequantize(tool, qtype, raw: np.ndarray, n: int, tmp_path) -> np.ndarray:
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(np.ascontiguousarray(raw).tobytes())
    subprocess.run([str(tool), str(int(qtype)), str(n), str(src), str(dst)], check=True, capture_output=True)
    out = np.fromfile(dst, dtype="<f4")
    assert out.size == n
    return out


def compare(ours: np.ndarray, ref: np.ndarray, what: str, rel_tol: float = 0.0) -> float:
    ref = np.asarray(ref, dtype=np.float32).reshape(-1)
    assert ours.shape == ref.shape, what
    assert np.array_equal(np.isnan(ours), np.isnan(ref)), f"{what}: NaN positions differ"
    finite = ~np.isnan(ref)
    assert np.array_equal(np.isinf(ours[finite]), np.isinf(ref[finite])), f"{what}: inf positions differ"
    ok = finite & ~np.isinf(ref)
    diff = np.abs(ours[ok].astype(np.float64) - ref[ok].astype(np.float64))
    max_diff = float(diff.max()) if diff.size else 0.0
    bound = rel_tol * np.maximum(1.0, np.abs(ref[ok].astype(np.float64)))
    print(f"{what}: {ref.size} values, max abs diff {max_diff:.3g}")
    assert np.all(diff <= bound), f"{what}: max abs diff {max_diff}"
    return max_diff


def random_blocks(qtype, n_blocks: int, rng) -> np.ndarray:
    block, size, scales = LAYOUT[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in scales:
        # small finite scales of both signs: |d| in [2^-12, 2^2)
        d = (rng.uniform(0.5, 1.0, n_blocks) * 2.0 ** rng.integers(-12, 2, n_blocks)
             * rng.choice([-1.0, 1.0], n_blocks)).astype(np.float16)
        raw[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return raw


@pytest.mark.parametrize("qtype", QUANTIZABLE, ids=lambda t: t.name)
def test_quantized_random_floats(qtype, dump_tool, tmp_path):
    rng = np.random.default_rng(1000 + int(qtype))
    block = LAYOUT[qtype][0]
    x = (rng.standard_normal((8, 32 * block)) * rng.uniform(0.01, 10.0, (8, 1))).astype(np.float32)
    x[0, :block] = 0.0  # an all-zero block (scale 0)
    q = quants.quantize(x, qtype)
    ref = quants.dequantize(q, qtype)
    ours = lctx_dequantize(dump_tool, qtype, q, x.size, tmp_path)
    compare(ours, ref, f"{qtype.name} quantized")


@pytest.mark.parametrize("qtype", RANDOM_BLOCKS, ids=lambda t: t.name)
def test_random_blocks(qtype, dump_tool, tmp_path):
    rng = np.random.default_rng(2000 + int(qtype))
    block = LAYOUT[qtype][0]
    n_blocks = 4096 if block == 1 else 512
    raw = random_blocks(qtype, n_blocks, rng)
    ref = quants.dequantize(raw.reshape(-1), qtype)
    ours = lctx_dequantize(dump_tool, qtype, raw, n_blocks * block, tmp_path)
    compare(ours, ref, f"{qtype.name} random blocks")


def test_q8_1_numpy_reference(dump_tool, tmp_path):
    # block_q8_1: fp16 d, fp16 s (= d * sum(qs), unused to dequantize), int8 qs[32]
    rng = np.random.default_rng(9)
    raw = random_blocks(T.Q8_1, 300, rng)
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
    qs = raw[:, 4:].view(np.int8).astype(np.float32)
    ref = d * qs
    ours = lctx_dequantize(dump_tool, T.Q8_1, raw, 300 * 32, tmp_path)
    compare(ours, ref, "Q8_1 numpy reference")


def test_q8_k_numpy_reference(dump_tool, tmp_path):
    # block_q8_K: float32 d, int8 qs[256], int16 bsums[16]
    rng = np.random.default_rng(10)
    raw = rng.integers(0, 256, size=(200, 292), dtype=np.uint8)
    d = rng.uniform(-0.1, 0.1, 200).astype(np.float32)
    raw[:, 0:4] = d.view(np.uint8).reshape(200, 4)
    ref = d[:, None] * raw[:, 4:260].view(np.int8).astype(np.float32)
    ours = lctx_dequantize(dump_tool, T.Q8_K, raw, 200 * 256, tmp_path)
    compare(ours, ref, "Q8_K numpy reference")


def test_bad_input_is_refused(dump_tool, tmp_path):
    src = tmp_path / "in.bin"
    src.write_bytes(b"\0" * 10)
    r = subprocess.run([str(dump_tool), "Q8_0", "32", str(src), str(tmp_path / "o.bin")], capture_output=True, text=True)
    assert r.returncode == 1 and "need 34 bytes" in r.stderr
    r = subprocess.run([str(dump_tool), "I32", "4", str(src), str(tmp_path / "o.bin")], capture_output=True, text=True)
    assert r.returncode == 1


def test_smollm2_real_tensors(dump_tool, tmp_path):
    if not SMOLLM2.exists():
        pytest.fail(f"model missing: {SMOLLM2} (run scripts/fetch-models.sh)", pytrace=False)
    reader = gguf_readers.reader(SMOLLM2)
    tensors = {t.name: t for t in reader.tensors}
    checked = 0
    # Q8_0 embedding rows (first, some middle, last)
    emb = tensors["token_embd.weight"]
    assert emb.tensor_type == T.Q8_0
    rows = np.asarray(emb.data)[[0, 1, 2, 1000, 30000, 49151]]
    n = rows.shape[0] * int(emb.shape[0])
    compare(lctx_dequantize(dump_tool, T.Q8_0, rows, n, tmp_path), quants.dequantize(rows, T.Q8_0),
            "SmolLM2 token_embd rows (Q8_0)")
    checked += 1
    for name in ["blk.0.ffn_down.weight", "blk.0.attn_q.weight", "blk.29.ffn_gate.weight", "blk.15.attn_v.weight"]:
        t = tensors[name]
        assert t.tensor_type == T.Q4_1
        raw = np.asarray(t.data)
        n = int(np.prod([int(s) for s in t.shape]))
        compare(lctx_dequantize(dump_tool, T.Q4_1, raw, n, tmp_path), quants.dequantize(raw, T.Q4_1),
                f"SmolLM2 {name} (Q4_1)")
        checked += 1
    norm = tensors["blk.0.attn_norm.weight"]
    raw = np.asarray(norm.data).view(np.uint8)
    compare(lctx_dequantize(dump_tool, T.F32, raw, int(norm.shape[0]), tmp_path), np.asarray(norm.data),
            "SmolLM2 blk.0.attn_norm.weight (F32)")
    assert checked == 5
