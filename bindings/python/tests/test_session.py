"""The five stages, generation, callbacks and errors on stories260K."""
import threading

import pytest

import lctx

DOC = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
       "One day, she saw a big red ball under a tree. ") * 3


@pytest.fixture
def session(model):
    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1) as s:
        yield s


def test_stages_and_greedy_is_argmax(model, session):
    np = pytest.importorskip("numpy")
    assert session.stage == lctx.Stage.FEEDING
    n = session.feed(DOC)
    assert session.n_fed == n == len(model.tokenize(DOC))
    session.build_index()
    assert session.stage == lctx.Stage.INDEXED
    with session.select(model.tokenize(" She", add_special=False)) as sel:
        assert session.stage == lctx.Stage.SELECTED
        pos = np.frombuffer(sel.positions, dtype=np.int64)
        assert len(sel) == len(pos) == len(sel.scores)
        assert np.all(np.diff(pos) > 0) and pos.min() >= 0 and pos.max() < n
        session.recompute(sel)
    logits = np.frombuffer(session.logits, dtype=np.float32)
    assert logits.shape == (model.n_vocab,) and np.isfinite(logits).all()
    tok = session.decode()
    assert session.stage == lctx.Stage.DECODING
    assert tok == int(np.argmax(logits))


def test_wrong_stage_raises_state_error(session):
    with pytest.raises(lctx.StateError) as e:
        session.decode()
    assert e.value.status == lctx.Status.STATE
    assert session.last_error == str(e.value)
    session.feed(DOC)  # the session is still usable


def test_bad_token_in_feed(model, session):
    with pytest.raises(lctx.InvalidArgumentError):
        session.feed([1, 2, model.n_vocab + 100])


def test_ask_many_is_deterministic(model):
    answers = []
    for _ in range(2):
        with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1) as s:
            s.feed(DOC)
            first = s.ask(" Lily saw a", max_tokens=16)
            second = s.ask(" The ball was", max_tokens=16)
            answers.append((first, second))
    assert answers[0] == answers[1]
    assert answers[0][0] and answers[0][1]


def test_generate_pieces_join_to_detokenized_tokens(model):
    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1) as a, model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1) as b:
        for s in (a, b):
            s.feed(DOC)
            s.build_index()
            with s.select(model.tokenize(" She", add_special=False)) as sel:
                s.recompute(sel)
        ids = list(a.tokens(24))
        text = "".join(b.generate(24))
        assert ids and text
        assert text == b"".join(model.token_to_piece(t) for t in ids).decode("utf-8", "replace")


def test_sampling_seed_reproducible(model):
    outs = []
    for seed in (7, 7, 8):
        with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1) as s:
            s.feed(DOC)
            outs.append(s.ask(" She", 20, lctx.Sampling(temperature=1.0, top_k=40, seed=seed)))
    assert outs[0] == outs[1]


def test_progress_callback_and_cancel(model):
    seen = []
    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1, n_batch=16, progress=lambda d: seen.append(d)) as s:
        s.feed(DOC)
    assert seen and all(0.0 <= d <= 1.0 for d in seen)

    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1, n_batch=16, progress=lambda d: True) as s:
        with pytest.raises(lctx.CancelledError):
            s.feed(DOC)
        assert s.stage == lctx.Stage.FEEDING  # left valid


def test_progress_exception_propagates(model):
    def boom(done):
        raise KeyError("from the callback")

    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1, n_batch=16, progress=boom) as s:
        with pytest.raises(KeyError, match="from the callback"):
            s.feed(DOC)


def test_cancel_from_another_thread(model):
    started = threading.Event()

    def progress(done):
        started.set()
        return None

    with model.session(method=lctx.Method.FULL, n_ctx=2048, n_threads=1, n_batch=8, progress=progress) as s:
        t = threading.Timer(0.0, lambda: (started.wait(5), s.cancel()))
        t.start()
        try:
            s.feed(DOC * 8)  # may finish before the cancel lands on a fast machine
        except lctx.CancelledError:
            pass
        t.join()
        assert s.stage == lctx.Stage.FEEDING


def test_unknown_param_and_method(model):
    with pytest.raises(TypeError):
        model.session(no_such_param=1)
    # Every registry method is implemented: a value outside the enum is refused.
    with pytest.raises(lctx.InvalidArgumentError, match="unknown method"):
        model.session(method=len(lctx.Method))


def _full_session_answers(model, **params):
    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1, **params) as s:
        s.feed(DOC)
        s.build_index()
        with s.select(model.tokenize(" She", add_special=False)) as sel:
            s.recompute(sel)
        assert s.decode() >= 0


def test_bf16_precision_fields_by_name(model):
    # lctx_session_params.attn_precision / matmul_precision (docs/bf16.md):
    # set by name like every common field; a value outside the enum is
    # refused with the field's name; bf16 answers (f32 where the CPU lacks it).
    from lctx import capi
    with pytest.raises(lctx.InvalidArgumentError, match="matmul_precision 9"):
        model.session(method=lctx.Method.FULL, n_ctx=512, matmul_precision=9)
    _full_session_answers(model, attn_precision=capi.LCTX_PRECISION_BF16, matmul_precision=capi.LCTX_PRECISION_BF16)


def test_int8_matmul_precision_by_name(model):
    # matmul_precision = LCTX_PRECISION_INT8 (docs/int8.md): a FULL session
    # answers (exact f32 where the CPU lacks AVX2); attention refuses int8.
    from lctx import capi
    with pytest.raises(lctx.InvalidArgumentError, match="attn_precision"):
        model.session(method=lctx.Method.FULL, n_ctx=512, attn_precision=capi.LCTX_PRECISION_INT8)
    _full_session_answers(model, matmul_precision=capi.LCTX_PRECISION_INT8)


def test_kv_q8_by_name(model):
    # lctx_session_params.kv_type = LCTX_KV_Q8 (docs/kv-storage.md): int8
    # rows, CPU backend; the session runs to an answer like the f32 one.
    from lctx import capi
    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1, kv_type=capi.LCTX_KV_Q8) as s:
        s.feed(DOC)
        s.build_index()
        with s.select(model.tokenize(" She", add_special=False)) as sel:
            s.recompute(sel)
        assert s.decode() >= 0
    with pytest.raises(lctx.InvalidArgumentError, match="LCTX_KV_Q8"):
        model.session(method=lctx.Method.FULL, n_ctx=512, kv_type=5)


def test_log_handler_receives_messages(model):
    got = []
    lctx.set_log_handler(lambda level, msg: got.append((level, msg)), lctx.LogLevel.DEBUG)
    try:
        with model.session(method=lctx.Method.FULL, n_ctx=128, n_threads=1) as s:
            s.feed("Hello")
        try:  # REFORM without a head profile for this model logs a warning
            with model.session(method=lctx.Method.REFORM, n_threads=1) as s:
                pass
        except lctx.UnsupportedError:
            pass
    finally:
        lctx.set_log_handler(None)
    assert all(isinstance(m, str) and isinstance(l, lctx.LogLevel) for l, m in got)


def test_numpy_arrays_when_installed_lists_otherwise(model, monkeypatch):
    np = pytest.importorskip("numpy")
    from lctx import _session
    with model.session(method=lctx.Method.FULL, n_ctx=512, n_threads=1) as s:
        s.feed_text("Once upon a time there was a cat.")
        s.build_index()
        with s.select(" The cat") as sel:
            assert isinstance(sel.positions, np.ndarray) and sel.positions.dtype == np.int64
            assert isinstance(sel.scores, np.ndarray) and sel.scores.dtype == np.float32
            s.recompute(sel)
            assert isinstance(s.logits, np.ndarray) and s.logits.shape == (model.n_vocab,)
            monkeypatch.setattr(_session, "_np", None)   # as without numpy
            assert isinstance(sel.positions, list) and sel.positions == list(range(len(sel)))
            assert isinstance(s.logits, list) and len(s.logits) == model.n_vocab


@pytest.mark.parametrize("pieces,stops,want", [
    (["ab", "c\nd", "e"], ["\n"], ["ab", "c"]),
    (["a<", "/s", ">b"], ["</s>"], ["a"]),
    (["a<", "b"], ["</s>"], ["a", "<b"]),
    (["x", "y"], [], ["x", "y"]),
])
def test_stop_filter_holds_back_possible_stops(pieces, stops, want):
    from lctx._session import _StopFilter
    f = _StopFilter(stops)
    out = []
    for p in pieces:
        t = f.push(p)
        if t:
            out.append(t)
        if f.done:
            break
    t = f.flush()
    if t:
        out.append(t)
    assert out == want


def test_conversation_second_question_sees_the_first(model):
    with model.session(method=lctx.Method.FULL, n_threads=1) as s:
        chat = lctx.Conversation(s, chat=False)
        chat.feed_text("Lily had a red ball.")
        a1 = chat.ask("What did Lily have?", 4)
        assert chat.query("Why?") == f"\n\nWhat did Lily have?\n{a1}\n\nWhy?\n"
        chat.ask("Why?", 4)
        assert [q for q, _ in chat.history] == ["What did Lily have?", "Why?"]
    with model.session(n_threads=1) as s, pytest.raises(ValueError):
        s.feed_text("already fed")
        lctx.Conversation(s)
