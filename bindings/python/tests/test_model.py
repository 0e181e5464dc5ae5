"""Model loading, metadata (checked against the gguf package) and errors."""
import pytest

import lctx


def test_load_errors_carry_the_message(tmp_path):
    missing = tmp_path / "missing.gguf"
    with pytest.raises(lctx.IoError) as e:
        lctx.Model(missing)
    assert e.value.status == lctx.Status.IO
    assert str(missing) in str(e.value)
    assert str(missing) in lctx.last_error()

    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(lctx.FormatError):
        lctx.Model(junk)
    with pytest.raises(lctx.FormatError):
        lctx.Model(data=b"not a gguf file at all")


def test_metadata_matches_gguf_reader(model, tiny_path):
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(str(tiny_path))

    def field(key):
        f = r.fields[key]
        return f.parts[f.data[0]].tolist()[0]

    assert model.architecture == "llama"
    assert model.n_layer == field("llama.block_count")
    assert model.n_embd == field("llama.embedding_length")
    assert model.n_head == field("llama.attention.head_count")
    assert model.n_ctx_train == field("llama.context_length")
    assert model.n_vocab == len(r.fields["tokenizer.ggml.tokens"].data)
    assert model.token_bos == field("tokenizer.ggml.bos_token_id")
    assert model.token_eos == field("tokenizer.ggml.eos_token_id")
    assert model.is_eog(model.token_eos) and not model.is_eog(model.token_bos)
    assert model.n_params == sum(int(t.n_elements) for t in r.tensors)
    assert model.meta("general.architecture") == "llama"
    assert model.meta("no.such.key") is None
    assert model.chat_template == ""


def test_load_from_memory_equals_file(model, tiny_path):
    with lctx.Model(data=tiny_path.read_bytes()) as m2:
        assert m2.n_vocab == model.n_vocab and m2.n_params == model.n_params
        text = "The little dog ran home."
        assert list(m2.tokenize(text)) == list(model.tokenize(text))


def test_chat_apply_unsupported(model):
    with pytest.raises(lctx.UnsupportedError) as e:
        model.chat_apply([("user", "hi")])
    assert e.value.status == lctx.Status.UNSUPPORTED and str(e.value)
    assert model.prompt_parts() == ("", "\n")


def test_closed_model_raises(tiny_path):
    m = lctx.Model(tiny_path)
    s = m.session(method=lctx.Method.FULL, n_ctx=64)
    m.close()
    m.close()  # idempotent
    with pytest.raises(ValueError):
        m.n_vocab
    with pytest.raises(ValueError):
        s.n_fed  # closing the model closed its sessions first
