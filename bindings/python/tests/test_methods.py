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
