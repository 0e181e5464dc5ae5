"""lctx's tokenizer against llama.cpp (through llama-cpp-python) on the same
GGUF files: >= 1,000 deterministic, varied strings tokenized with and
without add_special / parse_special, token_to_piece for every vocab id,
detokenize, and the special token ids / EOG set. Models: SmolLM2 (BPE),
stories260K and Gemma 3 270M (SentencePiece, 262,144 tokens)."""
import atexit
import ctypes
import os
import pathlib
import random
import shutil
import struct
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LCTX_BUILD_DIR", ROOT / "build" / "release"))
MODELS = pathlib.Path(os.environ.get("LCTX_MODELS_DIR", ROOT / "models"))
MODEL_PATHS = {
    "smollm2": MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf",
    "stories": ROOT / "tests" / "data" / "stories260K.gguf",
    "gemma3": MODELS / "gemma-3-270m-q4_k_m.gguf",
}

llama_cpp = pytest.importorskip("llama_cpp")

# --- deterministic test strings -------------------------------------------

WORDS = ("the quick brown fox jumps over lazy dog Hello World HELLO tokenization "
         "internationalization a I an of to is was Once upon time little girl named Lily "
         "supercalifragilistic pneumonoultramicroscopic").split()
SCRIPTS = [
    "café naïve résumé Ångström façade jalapeño œuvre ß straße",
    "Ελληνικά γλώσσα αβγδε ΑΒΓΔΕ", "Русский язык привет мир Ёё", "Українська їжак ґанок",
    "العربية مرحبا بالعالم ١٢٣٤٥", "עברית שלום עולם", "हिन्दी नमस्ते दुनिया १२३", "ภาษาไทย สวัสดีครับ",
    "中文 你好世界 汉字测试", "日本語 こんにちは カタカナ ﾊﾝｶｸ", "한국어 안녕하세요 세계", "ქართული ენა",
    "Հայերեն լեզու", "বাংলা ভাষা", "தமிழ் மொழி", "ⲀⲂⲄ ᚠᚢᚦ ᛗᛁ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕮𝖔𝖉𝖊 𝟘𝟙𝟚",
    "e\u0301 a\u0308 n\u0303 combining", "ﬁ ﬂ ligatures ½ ¾ ² ³ Ⅻ ⅷ ① ⑩", "０１２３ ＡＢＣ ｆｕｌｌ",
]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🤖", "✨", "🧑🏿‍🚀", "🏳️‍🌈", "☃", "⚡", "🙂🙃"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\u00a0", "\u3000", "\u2009",
          "\u2028", "\x0b", "\x0c", "        ", " \t \n"]
DIGITS = ["0", "7", "42", "123", "2024", "1234567", "3.14159", "1,000,000", "-17", "0x1F", "1e-9",
          "٣٤٥", "१२३", "１２３", "Ⅳ", "²³"]
CODE = [
    "def f(x):\n    return x**2 + 1\n", "int main() { return 0; }", "for (i = 0; i < n; ++i) {}",
    "if a != b && c >= d || !e:", "x = [1, 2, 3]  # comment", "<div class=\"a\">text</div>",
    "SELECT * FROM t WHERE id = 5;", "$HOME/.config/~user", "a->b::c<<d>>e", "{\"key\": [null, true]}",
    "@decorator\nclass A(B):\n\tpass", "    indented\n        more", "#include <stdio.h>", "`x` ~y ^z |w",
]
CONTRACTIONS = ["don't", "I'm", "we're", "they've", "he'll", "she'd", "it's", "IT'S", "Don'T", "'s", "'t",
                "'re", "'ve", "'m", "'ll", "'d", "' s", "rock'n'roll", "''quoted''", "o'clock"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<repo_name>",
            "<reponame>", "<file_sep>", "<|im_start|>user\n", "<|im_", "im_end|>", "<s", "<<s>>",
            "<|im_start|><|im_end|>", "<0x41>", "▁", "▁▁hello"]
PUNCT = ["!", "?", "...", "--", "—", "«»", "“quoted”", "(", ")", ".", ",", ";", ":", "¿¡", "§", "€$¥",
         "•", "…", "@#%&*", "\\", "/", "_", "__init__"]


def _random_codepoint(rng: random.Random) -> str:
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F),
              (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2190, 0x23FF), (0x3000, 0x30FF),
              (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x10000, 0x1007F),
              (0x1D400, 0x1D7FF), (0x0, 0x1F)]
    lo, hi = rng.choice(ranges)
    return chr(rng.randint(lo, hi))


def _piece(rng: random.Random) -> str:
    kind = rng.randrange(11)
    if kind == 0:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    if kind == 1:
        s = rng.choice(SCRIPTS)
        a = rng.randrange(len(s))
        return s[a:a + rng.randint(1, 20)]
    if kind == 2:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
    if kind == 3:
        return rng.choice(SPACES)
    if kind == 4:
        return rng.choice(DIGITS) if rng.random() < 0.6 else str(rng.randrange(10 ** rng.randint(1, 15)))
    if kind == 5:
        return rng.choice(CODE)
    if kind == 6:
        return rng.choice(CONTRACTIONS)
    if kind == 7:
        return rng.choice(SPECIALS)
    if kind == 8:
        return rng.choice(PUNCT)
    if kind == 9:
        return "".join(_random_codepoint(rng) for _ in range(rng.randint(1, 8)))
    return rng.choice(WORDS).upper() if rng.random() < 0.5 else rng.choice(WORDS).capitalize()


def make_strings(n: int = 1200, seed: int = 1234) -> list:
    rng = random.Random(seed)
    fixed = ["", " ", "  ", "\n", "\n\n\n", "a", " a", "a ", "  a  ", "Hello world", " Hello", "\tTab",
             "<s>hello", "hi<s>there", "<|im_start|>user\nhi<|im_end|>\n", " 123 4567", "x" * 500,
             "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<bos>x", "<eos>", "<pad><mask>",
             " " * 40 + "end", "1" * 64, "Hello\u00a0world", "a\r\nb\rc\nd"]
    out = [s.encode() for s in fixed]
    while len(out) < n:
        sep = rng.choice(["", " ", "", "\n", " "])
        out.append(sep.join(_piece(rng) for _ in range(rng.randint(1, 12))).encode())
    # Byte strings llama.cpp decodes to U+FFFD (lone continuation bytes,
    # truncated sequences, 0xFF, overlong forms, surrogates).
    out += [b"\x80abc", b"abc\xc3", b"\xff\xfe", b"x\xc0\x80y", b"\xed\xa0\x80", b"\xe2\x82", b"ok \xf0\x9f\x98"]
    return out


STRINGS = make_strings()

# --- helpers ----------------------------------------------------------------


def _dump_tool() -> pathlib.Path:
    p = BUILD / "tests" / "lctx_tokenize_dump"
    if not p.exists():
        pytest.skip(f"{p} not built (cmake --build {BUILD} --target lctx_tokenize_dump)")
    return p


def _make_pre_variant(src: pathlib.Path, pre: str) -> pathlib.Path:
    """A vocab-only copy of src's metadata with another tokenizer.ggml.pre,
    to test that pre-tokenizer on a real vocabulary (llama.cpp loads it with
    vocab_only=True)."""
    gguf = pytest.importorskip("gguf")
    import gguf_readers
    tmp = tempfile.mkdtemp(prefix="lctx_tok_")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    dst = pathlib.Path(tmp) / f"vocab_{pre}.gguf"
    r = gguf_readers.reader(src)
    w = gguf.GGUFWriter(str(dst), r.fields["general.architecture"].contents())
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        v = pre if k == "tokenizer.ggml.pre" else f.contents()
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, v, f.types[0], sub_type=f.types[-1])
        else:
            w.add_key_value(k, v, f.types[0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def _model(name: str) -> pathlib.Path:
    if name == "smollm2_gpt2pre":  # SmolLM2's vocabulary with the "gpt-2" pre-tokenizer
        if name not in MODEL_PATHS:
            MODEL_PATHS[name] = _make_pre_variant(_model("smollm2"), "gpt-2")
        return MODEL_PATHS[name]
    p = MODEL_PATHS[name]
    if name == "gemma3":
        from conftest import need_gemma3
        return need_gemma3(p)
    if not p.exists():
        hint = "committed under tests/data/" if name == "stories" else "run scripts/fetch-models.sh"
        pytest.fail(f"{name} model missing: {p} ({hint})", pytrace=False)
    return p


_LLAMAS = {}


def _llama(path: pathlib.Path):
    if path not in _LLAMAS:
        _LLAMAS[path] = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    return _LLAMAS[path]


def _run_dump(tmp_path, model, mode, records: bytes) -> list:
    inp, out = tmp_path / "in.bin", tmp_path / "out.txt"
    inp.write_bytes(records)
    subprocess.run([str(_dump_tool()), str(model), mode, str(inp), str(out)], check=True, timeout=300)
    return out.read_bytes().decode().split("\n")[:-1]


def _report(mismatches, total, what):
    if mismatches:
        lines = [f"{len(mismatches)}/{total} {what} differ from llama.cpp; first ones:"]
        lines += [repr(m) for m in mismatches[:15]]
        pytest.fail("\n".join(lines))


# --- tests --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["smollm2", "stories", "gemma3", "smollm2_gpt2pre"])
@pytest.mark.parametrize("add_special,parse_special", [(False, False), (True, True), (False, True), (True, False)])
def test_tokenize_matches_llamacpp(tmp_path, name, add_special, parse_special):
    model = _model(name)
    llm = _llama(model)
    assert len(STRINGS) >= 1000
    records = b"".join(struct.pack("<I", len(s)) + s for s in STRINGS)
    ours = _run_dump(tmp_path, model, f"tok:{int(add_special)}{int(parse_special)}", records)
    assert len(ours) == len(STRINGS)
    mismatches = []
    for s, line in zip(STRINGS, ours):
        ref = llm.tokenize(s, add_bos=add_special, special=parse_special)
        got = [int(x) for x in line.split()]
        if got != ref:
            mismatches.append((s, ref, got))
    _report(mismatches, len(STRINGS), "tokenizations")


def _ref_piece(vocab, tok, special):
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, tok, buf, len(buf), 0, special)
    assert n >= 0
    return buf.raw[:n]


@pytest.mark.parametrize("name", ["smollm2", "stories", "gemma3"])
@pytest.mark.parametrize("special", [False, True])
def test_token_to_piece_every_id(tmp_path, name, special):
    model = _model(name)
    vocab = llama_cpp.llama_model_get_vocab(_llama(model).model)
    ours = _run_dump(tmp_path, model, f"pieces:{int(special)}", b"")
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    assert len(ours) == n
    mismatches = []
    for tok in range(n):
        ref = _ref_piece(vocab, tok, special)
        got = bytes.fromhex(ours[tok])
        if got != ref:
            mismatches.append((tok, ref, got))
    _report(mismatches, n, "pieces")


def _ref_detokenize(vocab, ids, special):
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    size = 64 + 64 * len(ids)
    buf = ctypes.create_string_buffer(size)
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, size, False, special)
    assert n >= 0
    return buf.raw[:n]


@pytest.mark.parametrize("name", ["smollm2", "stories", "gemma3", "smollm2_gpt2pre"])
@pytest.mark.parametrize("special", [False, True])
def test_detokenize_matches_llama_detokenize(tmp_path, name, special):
    model = _model(name)
    llm = _llama(model)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    rng = random.Random(99)
    seqs = [llm.tokenize(s, add_bos=True, special=True) for s in STRINGS[:400]]
    seqs += [[rng.randrange(n_vocab) for _ in range(rng.randint(0, 30))] for _ in range(400)]
    records = b"".join(struct.pack("<I", len(q)) + struct.pack(f"<{len(q)}I", *q) for q in seqs)
    ours = _run_dump(tmp_path, model, f"detok:{int(special)}", records)
    assert len(ours) == len(seqs)
    mismatches = []
    for q, line in zip(seqs, ours):
        ref = _ref_detokenize(vocab, q, special)
        got = bytes.fromhex(line) if not line.startswith("ERR") else line.encode()
        if got != ref:
            mismatches.append((q, ref, got))
    _report(mismatches, len(seqs), "detokenizations")


@pytest.mark.parametrize("name", ["smollm2", "stories", "gemma3"])
def test_special_ids_and_eog(tmp_path, name):
    model = _model(name)
    vocab = llama_cpp.llama_model_get_vocab(_llama(model).model)
    info = dict(line.split(" ", 1) if " " in line else (line, "") for line in _run_dump(tmp_path, model, "info", b""))
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    assert int(info["n_vocab"]) == n
    assert int(info["bos"]) == llama_cpp.llama_vocab_bos(vocab)
    assert int(info["eos"]) == llama_cpp.llama_vocab_eos(vocab)
    assert int(info["pad"]) == llama_cpp.llama_vocab_pad(vocab)
    assert int(info["add_bos"]) == int(llama_cpp.llama_vocab_get_add_bos(vocab))
    assert int(info["add_eos"]) == int(llama_cpp.llama_vocab_get_add_eos(vocab))
    assert [int(x) for x in info["eog"].split()] == [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    assert [int(x) for x in info["control"].split()] == [
        i for i in range(n) if llama_cpp.llama_vocab_is_control(vocab, i)]
