"""lctx.lm_eval, the lm-evaluation-harness adapter: the task of lm_eval_task/
(four pass key documents, generate_until, offline) through
lm_eval.simple_evaluate and `python -m lctx.lm_eval`, the answers against the
plain binding's for the same prompt, stop strings, errors, and loglikelihood
against the numpy reference forward of tests/reference. Skipped when lm-eval
is not installed (requirements-dev.txt installs it)."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

# The datasets library reads these when it is imported: offline, and a cache
# of our own (the task reads a local jsonl; nothing is downloaded).
# (created by datasets when a test reads the task; removed after the module)
_HF_CACHE = os.path.join(tempfile.gettempdir(), f"lctx-lm-eval-hf-{os.getpid()}")
_HF_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": _HF_CACHE}
_SAVED_ENV = {k: os.environ.get(k) for k in _HF_ENV}
os.environ.update(_HF_ENV)


def _restore_env():
    for k, v in _SAVED_ENV.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    shutil.rmtree(_HF_CACHE, ignore_errors=True)


try:
    lm_eval = pytest.importorskip("lm_eval")
except pytest.skip.Exception:
    _restore_env()
    raise
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

import lctx  # noqa: E402
from lctx import lm_eval as adapter  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
TASK_DIR = pathlib.Path(__file__).resolve().parent / "lm_eval_task"
TASK = "lctx_passkey"
METRIC = "exact_match,number"
SMOLLM = pathlib.Path(os.environ.get("LCTX_MODELS_DIR", ROOT / "models")) / "SmolLM2-135M-Instruct.Q4_1.gguf"
ROWS = [json.loads(line) for line in (TASK_DIR / "passkey.jsonl").read_text().splitlines()]
# REFORM with budgets below the documents' length (~400 tokens of stories260K),
# so that it selects and recomputes rather than giving FULL's answer.
SMALL_REFORM = dict(reform_chunk=64, reform_budget=64, reform_sink=4, reform_recent=4, reform_obs=16,
                    reform_recompute=48)


@pytest.fixture(scope="module", autouse=True)
def _hf_cache():
    yield
    _restore_env()


@pytest.fixture(scope="module")
def registered():
    return adapter.register()


def _evaluate(model_path, method, monkeypatch, **model_args):
    """simple_evaluate on the local task (from its directory: data_files are
    resolved against the working directory); returns (results, samples)."""
    monkeypatch.chdir(TASK_DIR)
    res = lm_eval.simple_evaluate(
        model="lctx", model_args={"model": str(model_path), "method": method, "threads": 1, **model_args},
        tasks=[TASK], task_manager=TaskManager(include_path=str(TASK_DIR), include_defaults=False),
        log_samples=True)
    samples = sorted(res["samples"][TASK], key=lambda s: s["doc_id"])
    return res, samples


def _plain_answers(model, method, *, chat, max_tokens=16, stop=("\n",), **params):
    """The same prompts through the plain binding: Session.feed(document) then
    Session.ask(question) (with chat=True the Session frames them as one user
    turn of the template, "\\n\\n" between them)."""
    out = []
    for row in ROWS:
        with model.session(method=method, n_threads=1, chat=chat, **params) as s:
            s.feed(row["document"])
            q = row["question"] if chat else "\n\n" + row["question"]
            out.append(s.ask(q, max_tokens, stop=list(stop)))
    return out


def _instance(context, gen_kwargs, i=0):
    return Instance(request_type="generate_until", doc={}, arguments=(context, gen_kwargs), idx=i)


# -- generate_until through lm-eval -------------------------------------------
@pytest.mark.parametrize("method,params", [("full", {}), ("reform", SMALL_REFORM)])
def test_task_answers_are_the_plain_bindings(method, params, tiny_path, model, registered, monkeypatch):
    res, samples = _evaluate(tiny_path, method, monkeypatch, **params)
    assert METRIC in res["results"][TASK]
    assert 0.0 <= res["results"][TASK][METRIC] <= 1.0
    assert res["config"]["lctx_method"] == method
    assert [s["target"] for s in samples] == [r["answer"] for r in ROWS]
    answers = [s["resps"][0][0] for s in samples]
    expected = _plain_answers(model, lctx.method_from_name(method), chat=False, **params)
    assert answers == expected
    assert all("\n" not in a for a in answers)  # the task's stop string
    assert any(a.strip() for a in answers)


@pytest.mark.skipif(not SMOLLM.is_file(), reason=f"{SMOLLM} missing (scripts/fetch-models.sh)")
@pytest.mark.parametrize("method", ["full", "reform"])
def test_smollm2_finds_the_pass_keys(method, registered, monkeypatch):
    # The instruct model, in its chat template (chat=true, the default):
    # every pass key found, and the same answers as the plain binding's
    # chat session.
    res, samples = _evaluate(SMOLLM, method, monkeypatch)
    assert res["results"][TASK][METRIC] == 1.0, [s["resps"] for s in samples]
    assert res["config"]["lctx_chat"] is True
    with lctx.Model(SMOLLM, n_threads=1) as m:
        expected = _plain_answers(m, lctx.method_from_name(method), chat=True)
    assert [s["resps"][0][0] for s in samples] == expected


# -- the LM directly -----------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_lm(tiny_path):
    lm = adapter.LctxLM(model=str(tiny_path), method="reform", threads=1, **SMALL_REFORM)
    yield lm
    lm.close()


def test_stop_strings_cut_the_answer(tiny_lm):
    ctx = ROWS[0]["document"] + "\n\n" + ROWS[0]["question"]
    (full,) = tiny_lm.generate_until([_instance(ctx, {"until": [], "max_gen_toks": 24})])
    assert len(full) > 8, full
    # A stop string from the middle of the answer, first occurring there.
    i = next(i for i in range(4, len(full) - 3) if full.find(full[i:i + 3]) == i)
    stop, head = full[i:i + 3], full[:i]
    cut, cut2, same = tiny_lm.generate_until([_instance(ctx, {"until": [stop], "max_gen_toks": 24}, 0),
                                              _instance(ctx, {"until": stop, "max_gen_toks": 24}, 1),  # a string
                                              _instance(ctx, {"until": ["\x00never"], "max_gen_toks": 24}, 2)])
    assert cut == cut2 == head
    assert same == full
    # max_gen_toks bounds the answer (in tokens; the model's default when absent).
    (short,) = tiny_lm.generate_until([_instance(ctx, {"until": [], "max_gen_toks": 3})])
    assert full.startswith(short) and len(tiny_lm.model.tokenize(short, add_special=False)) <= 3


def test_questions_on_one_document_share_its_session(tiny_path, model):
    # Requests with the same document are answered by one session (read
    # once); each answer is the one a fresh session gives.
    lm = adapter.LctxLM(model=str(tiny_path), method="reform", threads=1, **SMALL_REFORM)
    doc = ROWS[1]["document"]
    questions = ["What is the pass key?", "Where is the sky?", "What is the pass key?"]
    reqs = [_instance(doc + "\n\n" + q, {"until": ["\n"], "max_gen_toks": 12}, i) for i, q in enumerate(questions)]
    assert len(lm._groups([lm.encode(r.args[0]) for r in reqs])) == 1
    got = lm.generate_until(reqs)
    lm.close()
    expected = []
    for q in questions:
        with model.session(method=lctx.Method.REFORM, n_threads=1, **SMALL_REFORM) as s:
            s.feed(doc)
            expected.append(s.ask("\n\n" + q, 12, stop=["\n"]))
    assert got == expected
    assert got[0] == got[2]


def test_split_document_and_question(tiny_lm):
    split = tiny_lm.split
    assert split("doc one\n\ndoc two\n\nQuestion: why?\nAnswer:") == ("doc one\n\ndoc two", "\n\nQuestion: why?\nAnswer:")
    assert split("a\n\nb\nQ?\n") == ("a", "\n\nb\nQ?\n")
    assert split("no separator at all") == ("", "no separator at all")
    # A last paragraph over max_query_tokens: the last line; a last line over
    # it: the last max_query_tokens tokens, cut at a space.
    lm = adapter.LctxLM.__new__(adapter.LctxLM)
    lm.model, lm.max_query_tokens = tiny_lm.model, 8
    long_par = "word " * 40
    assert lm.split("doc\n\n" + long_par + "\nWhat?") == ("doc\n\n" + long_par, "\nWhat?")
    doc, q = lm.split("x " * 200)
    assert doc + q == "x " * 200 and q.startswith(" ")
    assert len(tiny_lm.model.tokenize(q, add_special=False)) <= 8


def test_gen_kwargs_sampling(tiny_lm):
    ctx = ROWS[2]["document"] + "\n\n" + ROWS[2]["question"]
    greedy = tiny_lm.generate_until([_instance(ctx, {"until": [], "max_gen_toks": 12})])[0]
    # temperature without do_sample is greedy (lm-eval's convention; LongBench sets temperature 1)
    assert tiny_lm.generate_until([_instance(ctx, {"until": [], "max_gen_toks": 12, "temperature": 1.0})])[0] == greedy
    a, b = tiny_lm.generate_until([
        _instance(ctx, {"until": [], "max_gen_toks": 12, "do_sample": True, "temperature": 1.5, "seed": 7}, 0),
        _instance(ctx, {"until": [], "max_gen_toks": 12, "do_sample": True, "temperature": 1.5, "seed": 7}, 1)])
    assert a == b  # seeded


# -- errors ---------------------------------------------------------------------
def test_unknown_method_is_a_clear_error(tiny_path, registered):
    with pytest.raises(ValueError, match=r"unknown lctx method 'reformer'; valid methods: full, reform, ilre"):
        adapter.LctxLM(model=str(tiny_path), method="reformer")
    for name in adapter.method_names():
        assert name in ("reform+refreshkv", "ilre+refreshkv") or lctx.method_from_name(name).name.lower() == name
    assert {"full", "reform", "ilre", "reattention", "refreshkv", "snapkv"} <= set(adapter.method_names())
    # Through lm-eval's own loading (the model_args string of the command line).
    with pytest.raises(ValueError, match="valid methods"):
        lm_eval.simple_evaluate(model="lctx", model_args=f"model={tiny_path},method=nope", tasks=[TASK],
                                task_manager=TaskManager(include_path=str(TASK_DIR), include_defaults=False))
    with pytest.raises(ValueError, match="GGUF path"):
        adapter.LctxLM(method="full")
    with pytest.raises(ValueError, match="not found"):
        adapter.LctxLM(model=str(tiny_path) + ".missing")
    with pytest.raises(ValueError, match="reform_no_such_knob"):
        adapter.LctxLM(model=str(tiny_path), reform_no_such_knob=1)
    with pytest.raises(lctx.InvalidArgumentError, match="chunk"):  # the library's check, at load
        adapter.LctxLM(model=str(tiny_path), reform_chunk=-3)
    with pytest.raises(ValueError, match="chat"):
        adapter.LctxLM(model=str(tiny_path), chat="maybe")


def test_every_method_answers(tiny_path):
    ctx = ROWS[3]["document"] + "\n\n" + ROWS[3]["question"]
    for name in adapter.method_names():
        lm = adapter.LctxLM(model=str(tiny_path), method=name, threads=1)
        (ans,) = lm.generate_until([_instance(ctx, {"until": ["\n"], "max_gen_toks": 6})])
        assert isinstance(ans, str), name
        lm.close()


# -- chat templates ---------------------------------------------------------------
@pytest.mark.skipif(not SMOLLM.is_file(), reason=f"{SMOLLM} missing (scripts/fetch-models.sh)")
def test_chat_framing_and_harness_templates():
    lm = adapter.LctxLM(model=str(SMOLLM), method="full", threads=1)
    raw = adapter.LctxLM(model=str(SMOLLM), method="full", threads=1, chat=False)
    m = lm.model
    ctx = "A document.\n\nIt has <|im_start|> in it.\n\nWhat is it?"
    before, after = m.prompt_parts()
    doc, query = lm.encode(ctx)
    assert list(doc) == list(m.tokenize(before, add_special=True, parse_special=True)) + list(
        m.tokenize("A document.\n\nIt has <|im_start|> in it.", add_special=False, parse_special=False))
    assert list(query) == list(m.tokenize("\n\nWhat is it?", add_special=False)) + list(
        m.tokenize(after, add_special=False, parse_special=True))
    # chat=false: the raw text, BOS first, no template.
    rdoc, rquery = raw.encode(ctx)
    assert list(rdoc) == list(m.tokenize("A document.\n\nIt has <|im_start|> in it.", add_special=True))
    assert list(rquery) == list(m.tokenize("\n\nWhat is it?", add_special=False))
    # --apply_chat_template: the harness's messages in lctx's renderer; the
    # same tokens as the adapter's own framing for one user turn (not wrapped twice).
    text = lm.apply_chat_template([{"role": "user", "content": ctx}])
    assert text == m.chat_apply([("user", ctx)])
    assert lm.encode(text) == (doc, query)
    # A system message and an assistant prefill (a task's gen_prefix).
    text = lm.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": ctx},
                                   {"role": "assistant", "content": "The answer is"}], add_generation_prompt=False)
    assert text.startswith(m.chat_apply([("system", "Be brief.")], add_assistant=False)[:20])
    assert text.endswith("<|im_start|>assistant\nThe answer is")
    sdoc, squery = lm.encode(text)
    assert m.detokenize(squery, special=True).startswith("\n\nWhat is it?<|im_end|>")
    assert lm.chat_template() == m.chat_template
    lm.close()
    raw.close()


# -- loglikelihood against the numpy reference forward ------------------------------
@pytest.fixture(scope="module")
def reference(tiny_path):
    sys.path.insert(0, str(ROOT / "tests" / "reference"))
    try:
        import llama_ref
    finally:
        sys.path.pop(0)
    return llama_ref.LlamaRef(str(tiny_path))


def _ref_logprobs(reference, tokens):
    """log p(tokens[i] | tokens[:i]) for i >= 1, and whether each is the argmax."""
    import numpy as np
    logits, _ = reference.forward(tokens)
    logits = logits.astype(np.float64)
    logz = np.log(np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1)) + logits.max(axis=1)
    lp = [float(logits[i - 1, tokens[i]] - logz[i - 1]) for i in range(1, len(tokens))]
    top = [int(logits[i - 1].argmax()) == tokens[i] for i in range(1, len(tokens))]
    return lp, top


@pytest.mark.parametrize("method", ["full", "reform"])
def test_loglikelihood_matches_the_reference(method, tiny_path, reference):
    lm = adapter.LctxLM(model=str(tiny_path), method=method, threads=1)
    doc = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
    cases = [(doc + "\n\nWho loved to play?", " Lily loved to play."),
             (doc + "\n\nWho loved to play? ", "The girl."),           # the space moves to the continuation
             (doc + "\n\nWho loved to play?", " Lily"),                # the same document: one session
             ("", "Once upon a time")]                                # an empty context
    reqs = [Instance(request_type="loglikelihood", doc={}, arguments=c, idx=i) for i, c in enumerate(cases)]
    got = lm.loglikelihood(reqs)
    for (ctx, cont), (lp, greedy) in zip(cases, got):
        d, q, c = lm.encode_pair(ctx, cont)
        text = b"".join(lm.model.token_to_piece(t) for t in c).decode()
        assert text == (" " if ctx.endswith(" ") else "") + cont or (not ctx and text == " " + cont)
        tokens = list(d) + list(q) + list(c)
        ref_lp, ref_top = _ref_logprobs(reference, tokens)
        assert lp == pytest.approx(sum(ref_lp[-len(c):]), abs=2e-3), (ctx, cont)
        assert greedy == all(ref_top[-len(c):]), (ctx, cont)
    lm.close()


def test_loglikelihood_greedy_continuation(tiny_path):
    # The model's own greedy answer is greedy, and more likely than a changed one.
    lm = adapter.LctxLM(model=str(tiny_path), method="full", threads=1)
    ctx = "Once upon a time, there was a little girl named Lily.\n\nShe"
    (ans,) = lm.generate_until([_instance(ctx, {"until": [], "max_gen_toks": 6})])
    (lp, greedy), (lp2, greedy2) = lm.loglikelihood(
        [Instance(request_type="loglikelihood", doc={}, arguments=(ctx, ans), idx=0),
         Instance(request_type="loglikelihood", doc={}, arguments=(ctx, ans + " zebra"), idx=1)])
    assert greedy and lp < 0
    assert not greedy2 and lp2 < lp
    lm.close()


def test_loglikelihood_rolling_matches_the_reference(tiny_path, reference):
    text = "Lily and Ben went to the park. They saw a big dog and a little cat. The dog was happy."
    lm = adapter.LctxLM(model=str(tiny_path), method="full", threads=1, rolling_window=7)
    tokens = [lm.model.token_bos] + list(lm.model.tokenize(text, add_special=False))
    assert len(tokens) > 3 * 7  # several windows
    (got,) = lm.loglikelihood_rolling([Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,),
                                                idx=0)])
    ref_lp, _ = _ref_logprobs(reference, tokens)
    assert got == pytest.approx(sum(ref_lp), abs=5e-3)
    lm.close()


# -- the command line ------------------------------------------------------------
def test_cli_runs_end_to_end(tiny_path, tmp_path):
    import lctx as pkg
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(pathlib.Path(pkg.__file__).resolve().parents[1])] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "lctx.lm_eval", "--model", "lctx",
           "--model_args", f"model={tiny_path},method=reform,threads=1,max_gen_toks=8",
           "--include_path", str(TASK_DIR), "--tasks", TASK, "--limit", "2",
           "--output_path", str(out), "--log_samples"]
    r = subprocess.run(cmd, cwd=TASK_DIR, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "lctx_passkey" in r.stdout and "exact_match" in r.stdout  # lm-eval's table
    (results_file,) = out.rglob("results_*.json")
    results = json.loads(results_file.read_text())
    assert METRIC in results["results"][TASK]
    assert results["config"]["lctx_method"] == "reform"
    (samples_file,) = out.rglob(f"samples_{TASK}_*.jsonl")
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    assert len(samples) == 2 and all(isinstance(s["resps"][0][0], str) for s in samples)
