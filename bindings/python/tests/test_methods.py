"""The binding's method list against the library's registry (lctx_method_*,
read through the C API): same values, same names. Fails when lctx.Method
and the registry disagree (a method appended to one and not the other)."""
import pytest

import lctx
from lctx import capi


def test_method_enum_matches_the_registry():
    n = capi.lctx_method_count()
    assert n >= 12
    assert len(lctx.Method) == n, (sorted(m.name for m in lctx.Method), [capi.lctx_method_name(v) for v in range(n)])
    for m in lctx.Method:
        assert 0 <= m.value < n, m
        assert capi.lctx_method_name(m.value) == m.name.lower(), m
        assert capi.lctx_method_from_name(m.name.lower()) == m.value
    for v in range(n):
        assert lctx.Method(v).name.lower() == capi.lctx_method_name(v)
    assert capi.lctx_method_name(n) is None
    assert capi.lctx_method_description(n) is None


def test_methods_helpers():
    rows = lctx.methods()
    assert [r.method for r in rows] == list(lctx.Method)
    assert all(r.description and r.name == r.method.name.lower() for r in rows)
    implemented = {r.name for r in rows if r.implemented}
    assert {"full", "reform", "h2o", "infllm"} <= implemented
    assert "ilre" in implemented and "reattention" not in implemented
    assert lctx.method_from_name("REFORM") is lctx.Method.REFORM
    with pytest.raises(lctx.InvalidArgumentError, match="reformer"):
        lctx.method_from_name("reformer")


def test_implemented_agrees_with_session_create(model):
    for r in lctx.methods():
        if r.implemented:
            with model.session(method=r.method, n_threads=1):
                pass
        else:
            with pytest.raises(lctx.UnsupportedError, match=r.name):
                model.session(method=r.method, n_threads=1)


def test_method_knobs_go_to_their_structs(model):
    # Prefixed keyword arguments reach the method structs: a value out of
    # range is refused with the field's name.
    with pytest.raises(lctx.InvalidArgumentError, match="kv_chunk"):
        model.session(method=lctx.Method.INFLLM, kv_chunk=-1, n_threads=1)
    with pytest.raises(lctx.InvalidArgumentError, match="infllm_repr"):
        model.session(method=lctx.Method.INFLLM, infllm_block=4, infllm_repr=5, n_threads=1)
    with pytest.raises(lctx.InvalidArgumentError, match="infinipot_nuc_ratio"):
        model.session(method=lctx.Method.INFINIPOT, infinipot_nuc_ratio=2.0, n_threads=1)
    with pytest.raises(lctx.IoError, match="nonexistent"):
        model.session(method=lctx.Method.REFORM, reform_heads_path="/nonexistent/heads.json", n_threads=1)
    with pytest.raises(TypeError):
        model.session(reform_no_such_knob=1)
    with pytest.raises(TypeError):
        model.session(reform=None)
    with model.session(method=lctx.Method.H2O, kv_budget=64, kv_chunk=32, kv_sink=4, kv_recent=4, snapkv_kernel=5,
                       n_threads=1) as s:
        s.feed("Once upon a time there was a little girl.")
        s.build_index()


def test_ilre_session_with_explicit_params(model):
    # The ilre_* keyword arguments reach lctx_ilre_params: a session with
    # explicit knobs runs the five stages, the selection is the sinks + the
    # budget (the document is longer), and bad values are refused by name.
    doc = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 4
    params = dict(method=lctx.Method.ILRE, n_ctx=256, n_threads=1, ilre_retrieval_layer=1, ilre_sink=4,
                  ilre_window=32, ilre_chunk=64, ilre_budget=40, ilre_query_tokens=0, ilre_dca=True,
                  ilre_max_kernels="2,4", ilre_avg_kernels="1-8")
    with model.session(**params) as s:
        n = s.feed(doc)
        assert n > 4 + 40
        s.build_index()
        assert s.stage == lctx.Stage.INDEXED
        with s.select(model.tokenize(" Lily saw a", add_special=False)) as sel:
            pos = list(sel.positions)
            assert len(sel) == len(pos) == 4 + 40
            assert pos[:4] == [0, 1, 2, 3]  # the sinks are always gathered
            assert pos == sorted(set(pos)) and pos[-1] < n
            s.recompute(sel)
        toks = [s.decode() for _ in range(4)]
        assert s.stage == lctx.Stage.DECODING
        assert all(0 <= t < model.n_vocab for t in toks)
    for bad, name in ((dict(ilre_max_kernels="2,x"), "max_kernels"), (dict(ilre_avg_kernels="8-1"), "avg_kernels"),
                      (dict(ilre_chunk=-1), "chunk"), (dict(ilre_retrieval_layer=model.n_layer), "retrieval_layer")):
        with pytest.raises(lctx.InvalidArgumentError, match=name):
            model.session(**{**params, **bad})
    with pytest.raises(TypeError):
        model.session(method=lctx.Method.ILRE, ilre_no_such_knob=1)
