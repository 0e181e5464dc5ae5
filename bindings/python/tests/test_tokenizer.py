"""tokenize/detokenize/token_to_piece; pieces checked against the GGUF vocab."""
from array import array

import pytest

import lctx

TEXT = "Once upon a time, there was a little cat named Tom. He liked milk."


def test_roundtrip_and_bos(model):
    toks = model.tokenize(TEXT)
    assert isinstance(toks, array) and toks.typecode == "i"
    assert toks[0] == model.token_bos
    assert list(model.tokenize(TEXT, add_special=False)) == list(toks[1:])
    assert model.detokenize(toks).strip() == TEXT
    assert model.tokenize(TEXT.encode()) == toks  # bytes in == str in


def test_pieces_match_vocab(model, tiny_path):
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(str(tiny_path))
    f = r.fields["tokenizer.ggml.tokens"]
    vocab = [bytes(f.parts[i]).decode() for i in f.data]
    for tok in model.tokenize(TEXT, add_special=False):
        assert model.token_to_piece(tok) == vocab[tok].replace("\u2581", " ").encode()
    assert model.token_to_piece(model.token_bos) == b""
    assert model.token_to_piece(model.token_bos, special=True) == vocab[model.token_bos].encode()


def test_token_inputs_accept_buffers_and_sequences(model):
    np = pytest.importorskip("numpy")
    toks = model.tokenize(TEXT)
    expected = model.detokenize(toks)
    assert model.detokenize(list(toks)) == expected
    assert model.detokenize(tuple(toks)) == expected
    assert model.detokenize(np.frombuffer(toks, dtype=np.int32)) == expected
    assert model.detokenize(memoryview(toks)) == expected
    with pytest.raises(TypeError):
        model.detokenize(np.asarray(toks, dtype=np.int64))
    with pytest.raises(TypeError):
        model.detokenize(["a", "b"])
    with pytest.raises(OverflowError):
        model.detokenize([2**40])


def test_bad_token_raises(model):
    with pytest.raises(lctx.InvalidArgumentError) as e:
        model.token_to_piece(model.n_vocab + 5)
    assert str(model.n_vocab + 5) in str(e.value)
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError too
        model.detokenize([-3])
