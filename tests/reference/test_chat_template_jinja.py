"""lctx's chat formatting against jinja2 rendering of the real template
strings: SmolLM2's ChatML template read from its GGUF, and a Gemma 3 style
template (system folded into the first turn, assistant -> model)."""
import os
import pathlib
import struct
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LCTX_BUILD_DIR", ROOT / "build" / "release"))
MODELS = pathlib.Path(os.environ.get("LCTX_MODELS_DIR", ROOT / "models"))
SMOLLM2 = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"

jinja2 = pytest.importorskip("jinja2")

GEMMA3_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {{- message['content'] | trim }}\n"
    "    {{- '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{'<start_of_turn>model\\n'}}{%- endif -%}\n"
)

CONVERSATIONS = [
    [],
    [("user", "Hello!")],
    [("system", "You are terse."), ("user", "Hi")],
    [("user", "What is 2+2?"), ("assistant", "4"), ("user", "And 3+3?")],
    [("system", "Be kind.\nAlways."), ("user", "  padded content \n"), ("assistant", "Sure. "),
     ("user", "Unicode: héllo 😀 <tag>")],
    [("user", "multi\nline\n\nmessage"), ("assistant", "ok")],
    [("user", "")],
]


class _Raise(Exception):
    pass


def _render(template: str, msgs, add_generation_prompt: bool) -> str:
    env = jinja2.Environment()

    def raise_exception(msg):
        raise _Raise(msg)

    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=[{"role": r, "content": c} for r, c in msgs],
        add_generation_prompt=add_generation_prompt, bos_token="<bos>", eos_token="<eos>")


def _ours(tmp_path, template: str, convs, add: bool):
    tool = BUILD / "tests" / "lctx_tokenize_dump"
    if not tool.exists():
        pytest.skip(f"{tool} not built")
    tf, inp, out = tmp_path / "tmpl.txt", tmp_path / "in.bin", tmp_path / "out.txt"
    tf.write_bytes(template.encode())
    rec = b""
    for msgs in convs:
        rec += struct.pack("<I", len(msgs))
        for r, c in msgs:
            rec += struct.pack("<I", len(r.encode())) + r.encode() + struct.pack("<I", len(c.encode())) + c.encode()
    inp.write_bytes(rec)
    subprocess.run([str(tool), str(tf), f"chat:{int(add)}", str(inp), str(out)], check=True, timeout=60)
    return out.read_text().split("\n")[:-1]


def _compare(tmp_path, template, convs):
    for add in (False, True):
        ours = _ours(tmp_path, template, convs, add)
        assert len(ours) == len(convs)
        for msgs, line in zip(convs, ours):
            try:
                ref = _render(template, msgs, add)
            except _Raise:
                assert line.startswith("ERR"), (msgs, line)
                continue
            assert not line.startswith("ERR"), (msgs, line)
            assert bytes.fromhex(line).decode() == ref, (msgs, add)


def test_smollm2_chatml_matches_jinja(tmp_path):
    if not SMOLLM2.exists():
        pytest.fail(f"model missing: {SMOLLM2} (run scripts/fetch-models.sh)", pytrace=False)
    pytest.importorskip("gguf")
    import gguf_readers
    field = gguf_readers.reader(SMOLLM2).fields["tokenizer.chat_template"]
    template = bytes(field.parts[field.data[0]]).decode()
    assert "<|im_start|>" in template
    _compare(tmp_path, template, CONVERSATIONS)


def test_chatml_without_default_system_matches_jinja(tmp_path):
    template = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                "{% endif %}")
    _compare(tmp_path, template, CONVERSATIONS)


def test_gemma_matches_jinja(tmp_path):
    # (the template itself fails on an empty conversation: messages[0])
    convs = [c for c in CONVERSATIONS if c] + [[("assistant", "starts wrong")], [("user", "a"), ("user", "b")]]
    _compare(tmp_path, GEMMA3_TEMPLATE, convs)
