"""The binding's method list against the library's registry (lctx_method_*,
read through the C API): same values, same names. Fails when lctx.Method
and the registry disagree (a method appended to one and not the other)."""
from array import array

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
    # Every method of the registry is implemented; a value outside the enum is not.
    assert all(r.implemented for r in rows), [r.name for r in rows if not r.implemented]
    assert not capi.lctx_method_is_implemented(capi.lctx_method_count())
    assert lctx.method_from_name("REFORM") is lctx.Method.REFORM
    with pytest.raises(lctx.InvalidArgumentError, match="reformer"):
        lctx.method_from_name("reformer")


def test_implemented_agrees_with_session_create(model):
    for r in lctx.methods():
        assert r.implemented, r.name
        with model.session(method=r.method, n_threads=1):
            pass
    # A method value outside the enum is refused as an invalid argument.
    n = capi.lctx_method_count()
    for bad in (n, n + 7, -1):
        with pytest.raises(lctx.InvalidArgumentError, match="method"):
            model.session(method=bad, n_threads=1)


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
                      (dict(ilre_chunk=-1), "chunk"), (dict(ilre_retrieval_layer=model.n_layer), "retrieval_layer"),
                      (dict(ilre_score_distance=-3), "score_distance")):
        with pytest.raises(lctx.InvalidArgumentError, match=name):
            model.session(**{**params, **bad})
    with pytest.raises(TypeError):
        model.session(method=lctx.Method.ILRE, ilre_no_such_knob=1)
    # Position-free scoring at a fixed distance runs the same stages.
    with model.session(**{**params, "ilre_score_distance": 16}) as s:
        s.feed(doc)
        s.build_index()
        with s.select(model.tokenize(" Lily saw a", add_special=False)) as sel:
            assert len(sel) == 4 + 40 and list(sel.positions)[:4] == [0, 1, 2, 3]


def test_select_scores_are_the_ones_the_selection_used(model):
    # Session.select_scores (lctx_session_select_scores): one score per document
    # token, the selection's scores are the ranked scores at its positions, the
    # forced ranges are reported; refused before a select and for FULL.
    doc = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 4
    q = model.tokenize(" Lily saw a", add_special=False)
    # The document repeats itself: the repeat filters are off here, so that
    # ILRe's ranked scores are its raw ones (the filters have their own test).
    ilre = dict(method=lctx.Method.ILRE, n_ctx=256, n_threads=1, ilre_retrieval_layer=1, ilre_sink=4,
                ilre_window=32, ilre_chunk=64, ilre_budget=40, ilre_repeat_window=-1)
    reform = dict(method=lctx.Method.REFORM, n_ctx=256, n_threads=1, reform_chunk=64, reform_budget=64,
                  reform_sink=4, reform_recent=4, reform_obs=16, reform_recompute=48, reform_keep_first=3,
                  reform_keep_last=2, reform_pool_half=1, reform_repeat_window=-1)
    for params in (ilre, reform):
        with model.session(**params) as s:
            n = s.feed(doc)
            s.build_index()
            with pytest.raises(lctx.StateError):
                s.select_scores()
            with s.select(q) as sel:
                sc = s.select_scores()
                raw, ranked = list(sc.raw), list(sc.ranked)
                assert len(raw) == len(ranked) == n
                pos, sel_scores = list(sel.positions), list(sel.scores)
                assert sel_scores == [ranked[p] for p in pos]
                if params is ilre:
                    assert raw == ranked and (sc.forced_first, sc.forced_last) == (4, 0)
                    assert pos[:4] == [0, 1, 2, 3]
                else:
                    assert (sc.forced_first, sc.forced_last) == (3, 2)
                    assert {0, 1, 2, n - 2, n - 1} <= set(pos)
                # Outside the forced ranges, nothing left out ranks above the
                # lowest score the selection took.
                chosen = set(pos)
                taken = [ranked[p] for p in pos if sc.forced_first <= p < n - sc.forced_last]
                left = [ranked[p] for p in range(sc.forced_first, n - sc.forced_last) if p not in chosen]
                if params is reform:
                    assert taken and left and max(left) <= min(taken)
    with model.session(method=lctx.Method.FULL, n_ctx=256, n_threads=1) as s:
        s.feed(doc[:200])
        s.build_index()
        with s.select(q):
            with pytest.raises(lctx.UnsupportedError):
                s.select_scores()


def test_attended_shares_of_reattention(model):
    # Session.attended (lctx_session_attended): one share per stored token, in
    # [0, 1]; the global and local tokens were in every layer's window, the
    # middle only where a layer's spans fell (3 spans of 8: at most 24 of 264);
    # refused for FULL, whose decode attends to its whole cache.
    import random
    rng = random.Random(11)
    doc = [rng.randint(3, model.n_vocab - 1) for _ in range(300)]
    params = dict(method=lctx.Method.REATTENTION, n_ctx=512, n_threads=1, reattention_n_global=4,
                  reattention_n_local=32, reattention_span=8, reattention_n_spans=3, reattention_chunk=16)
    with model.session(**params) as s:
        assert len(s.attended()) == 0  # nothing stored yet
        assert s.feed(doc) == 300
        s.build_index()
        share = [float(v) for v in s.attended()]
        assert len(share) == 300 == s.n_fed
        assert all(0.0 <= v <= 1.0 for v in share), share
        assert share[:4] == [1.0] * 4
        assert share[-32:] == [1.0] * 32
        assert any(v == 0.0 for v in share[4:-32]), share[4:-32]
    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1) as s:
        s.feed(doc)
        s.build_index()
        with pytest.raises(lctx.UnsupportedError, match="attends to its whole cache"):
            s.attended()


def test_reform_repeat_window_ranks_repeated_text_once(model):
    # reform_repeat_window (lctx_reform_params.repeat_window): a document of
    # four copies of one passage; by default (16) the later copies rank below
    # every token of the first, with the raw scores untouched; -1 turns it off;
    # 1 is refused.
    doc = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 4
    q = model.tokenize(" Lily saw a", add_special=False)
    base = dict(method=lctx.Method.REFORM, n_ctx=256, n_threads=1, reform_chunk=64, reform_budget=64,
                reform_sink=4, reform_recent=4, reform_obs=16, reform_recompute=48, reform_pool_half=1)
    got = {}
    for window in (0, -1):
        with model.session(reform_repeat_window=window, **base) as s:
            n = s.feed(doc)
            s.build_index()
            with s.select(q):
                sc = s.select_scores()
                got[window] = (list(sc.raw), list(sc.ranked))
    raw_on, ranked_on = got[0]
    raw_off, ranked_off = got[-1]
    assert raw_on == raw_off
    later = range(n // 2, n - 16)   # inside the third and fourth copies
    assert all(ranked_on[t] < -2 for t in later)
    assert all(ranked_off[t] >= -1 for t in later)
    assert min(ranked_on[: n // 4]) >= -1   # the first copy keeps its scores
    with pytest.raises(lctx.InvalidArgumentError):
        with model.session(reform_repeat_window=1, **base):
            pass
    # ILRe (ilre_repeat_window): later copies rank with score 0, raw scores kept.
    ilre = dict(method=lctx.Method.ILRE, n_ctx=256, n_threads=1, ilre_retrieval_layer=1, ilre_sink=4,
                ilre_window=32, ilre_chunk=64, ilre_budget=40)
    for window in (0, -1):
        with model.session(ilre_repeat_window=window, **ilre) as s:
            s.feed(doc)
            s.build_index()
            with s.select(q):
                sc = s.select_scores()
                got[window] = (list(sc.raw), list(sc.ranked))
    assert got[0][0] == got[-1][0] == got[-1][1]
    assert all(got[0][1][t] == 0 for t in later)
    assert got[0][1][: n // 4] == got[0][0][: n // 4]
    with pytest.raises(lctx.InvalidArgumentError):
        with model.session(ilre_repeat_window=1, **ilre):
            pass


DOC = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "


def test_reattention_session_with_explicit_params(model):
    # The reattention_* keyword arguments reach lctx_reattention_params: with
    # small sizes a document longer than n_global + n_local has a middle, so
    # every layer scores it and attends to the winners' spans; the five stages
    # run, select returns every document position (the retrieval happens inside
    # attention) and the answer differs from FULL's (the middle is not read
    # whole). Bad values are refused by name.
    assert capi.lctx_reattention_params  # the struct and its defaults (-1: derived)
    d = capi.lctx_reattention_params()
    capi.lctx_reattention_default_params(d)
    assert (d.n_global, d.n_local, d.span, d.top_k, d.n_spans, d.chunk) == (-1,) * 6
    assert (d.reuse_steps, d.tile_max, d.store_max_ram, d.store_dir) == (1, False, 0, None)
    params = dict(method=lctx.Method.REATTENTION, n_ctx=512, n_threads=1, reattention_n_global=4,
                  reattention_n_local=64, reattention_span=8, reattention_top_k=2, reattention_n_spans=4,
                  reattention_chunk=16, reattention_reuse_steps=1, reattention_tile_max=False,
                  reattention_store_max_ram=0, reattention_store_dir=None)
    question = model.tokenize(" Lily saw a", add_special=False)
    with model.session(**params) as s:
        n = s.feed(DOC * 8)
        assert n > 4 + 64 + 4 * 8  # a middle larger than the spans
        s.build_index()
        with s.select(question) as sel:
            assert list(sel.positions) == list(range(n))
            s.recompute(sel)
        logits = s.logits
        toks = [s.decode() for _ in range(6)]
        assert s.stage == lctx.Stage.DECODING
        assert all(0 <= t < model.n_vocab for t in toks)
    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1) as f:
        f.feed(DOC * 8)
        f.build_index()
        with f.select(question) as sel:
            f.recompute(sel)
        assert len(f.logits) == len(logits) == model.n_vocab
        assert max(abs(a - b) for a, b in zip(f.logits, logits)) > 1e-4, "ReAttention read the whole document"
    for bad, name in ((dict(reattention_span=7), "span"), (dict(reattention_top_k=65), "top_k"),
                      (dict(reattention_chunk=65), "chunk"), (dict(reattention_n_local=0), "n_local")):
        with pytest.raises(lctx.InvalidArgumentError, match=name):
            model.session(**{**params, **bad})
    with pytest.raises(TypeError):
        model.session(method=lctx.Method.REATTENTION, reattention_no_such_knob=1)


def test_refreshkv_session_with_explicit_params(model):
    # The refreshkv_* keyword arguments reach lctx_refreshkv_params: K and the
    # stride are the ones given, the statistics count every decoded token at
    # every layer (full + partial = steps), and decode_token teacher-forces.
    d = capi.lctx_refreshkv_params()
    capi.lctx_refreshkv_default_params(d)
    assert (d.partial, d.stride, d.threshold, d.schedule, d.pool_kernel, d.max_partial_run, d.gathered) == \
        (0, 0, 0.0, lctx.RefreshKVSchedule.DYNAMIC, 0, 0, False)
    params = dict(method=lctx.Method.REFRESHKV, n_ctx=512, n_threads=1, refreshkv_partial=16, refreshkv_stride=2,
                  refreshkv_threshold=0.5, refreshkv_schedule=lctx.RefreshKVSchedule.DYNAMIC,
                  refreshkv_pool_kernel=3, refreshkv_max_partial_run=3, refreshkv_gathered=False)
    with model.session(**params) as s:
        n = s.feed(DOC * 4)
        assert n > 16
        s.build_index()
        with s.select(model.tokenize(" Lily saw a", add_special=False)) as sel:
            s.recompute(sel)
        toks = [s.decode() for _ in range(9)]
        assert all(0 <= t < model.n_vocab for t in toks)
        lp = s.decode_token(toks[0])
        assert isinstance(lp, float) and lp <= 0.0
        st = s.refreshkv_stats()
        assert st.n_layer == model.n_layer and st.partial == 16
        assert st.n_steps == 9  # 10 tokens decoded, the last one not yet appended
        assert st.n_full + st.n_partial == st.n_steps * st.n_layer
        assert len(st.layer_full) == len(st.layer_partial) == st.n_layer
        assert [f + p for f, p in zip(st.layer_full, st.layer_partial)] == [st.n_steps] * st.n_layer
        assert sum(st.layer_full) == st.n_full and min(st.layer_full) >= 3  # max_partial_run 3: at 3, 6, 9
        assert st.effective_stride >= 1.0
        with pytest.raises(lctx.InvalidArgumentError):
            s.decode_token(model.n_vocab + 5)
    with model.session(method=lctx.Method.FULL, n_ctx=256, n_threads=1) as f:
        with pytest.raises(lctx.UnsupportedError):  # FULL does not decode with RefreshKV
            f.refreshkv_stats()
    for bad, name in ((dict(refreshkv_pool_kernel=4), "pool_kernel"), (dict(refreshkv_stride=-1), "stride"),
                      (dict(refreshkv_partial=-2), "partial"), (dict(refreshkv_schedule=7), "schedule")):
        with pytest.raises(lctx.InvalidArgumentError, match=name):
            model.session(**{**params, **bad})


def test_set_refreshkv_switches_between_refreshkv_and_dense(model):
    # One REFRESHKV session answers a question with RefreshKV, densely after
    # set_refreshkv(None), then with RefreshKV again; each answer (greedy
    # tokens, then the logits after them) equals the one of a fresh session
    # of that way (FULL for dense). K = 8 slots of a ~100-token prompt: the
    # two ways answer differently, so the comparisons mean something.
    doc, question = DOC * 4, model.tokenize(" Lily saw a", add_special=False)
    knobs = dict(partial=8, stride=3)
    created = dict(n_ctx=512, n_threads=1, **{"refreshkv_" + k: v for k, v in knobs.items()})

    def answer(s):
        with s.select(question) as sel:
            s.recompute(sel)
        return [s.decode() for _ in range(16)], list(s.logits)

    def opened(method, **extra):
        s = model.session(method=method, **created, **extra)
        s.feed(doc)
        s.build_index()
        return s

    with opened(lctx.Method.REFRESHKV) as f:
        want_rkv = answer(f)
    with opened(lctx.Method.FULL) as f:
        want_full = answer(f)
    assert want_rkv[0] != want_full[0], "K too large for RefreshKV to differ from dense"

    with opened(lctx.Method.REFRESHKV) as s:
        assert answer(s) == want_rkv
        s.set_refreshkv(None)
        assert answer(s) == want_full
        with pytest.raises(lctx.UnsupportedError):  # dense: no RefreshKV statistics
            s.refreshkv_stats()
        s.set_refreshkv(**knobs)
        assert answer(s) == want_rkv
        assert s.refreshkv_stats().partial == 8

        with pytest.raises(lctx.InvalidArgumentError, match="stride"):
            s.set_refreshkv(partial=8, stride=-3)
        assert answer(s) == want_rkv  # the refused switch changed nothing
        with pytest.raises(TypeError):
            s.set_refreshkv(no_such_knob=1)
        with pytest.raises(TypeError):
            s.set_refreshkv(None, partial=8)

    with opened(lctx.Method.H2O, kv_budget=64) as h:
        with pytest.raises(lctx.UnsupportedError, match="h2o"):
            h.set_refreshkv(**knobs)
        with pytest.raises(lctx.UnsupportedError):
            h.set_refreshkv(None)


def test_op_times_of_a_profiled_session(model, monkeypatch):
    # LCTX_PROFILE_OPS in the environment when the session is made: every
    # backend call is timed; FULL attends once per layer and forward pass
    # in every layer whose rows are read.
    monkeypatch.setenv("LCTX_PROFILE_OPS", "1")
    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1, n_batch=64) as s:
        assert s.feed(array("i", range(3, 203))) == 200
        t = s.op_times()
    # 200 tokens in passes of 64; a fed chunk reads no logits, so the last
    # layer computes no row (docs/engine.md, "The last layer computes only the rows read")
    assert t.ops["attention"].calls == 4 * (model.n_layer - 1)
    assert all(o.calls > 0 and o.seconds >= 0 for o in t.ops.values())
    assert sum(o.seconds for o in t.ops.values()) <= t.lifetime_s
    assert t.ops["alloc"].bytes > 0
    monkeypatch.delenv("LCTX_PROFILE_OPS")
    with model.session(method=lctx.Method.FULL, n_ctx=256, n_threads=1) as f:
        with pytest.raises(lctx.UnsupportedError, match="LCTX_PROFILE_OPS"):
            f.op_times()
