"""The cases of bindings/tests/shared_cases.json, which the Java, Go and Rust
tests run too; the expected answers come from `lctx run` (make_shared_cases.py)."""
import json
import pathlib

import pytest

import lctx

ROOT = pathlib.Path(__file__).resolve().parents[3]
CASES = json.loads((ROOT / "bindings" / "tests" / "shared_cases.json").read_text(encoding="utf-8"))
MODEL = ROOT / CASES["model"]


@pytest.fixture(scope="module")
def shared_model():
    with lctx.Model(MODEL, n_threads=CASES["n_threads"]) as m:
        yield m


def session(model, method, **kw):
    params = {"n_threads": CASES["n_threads"], **kw}
    if method is not None:
        params["method"] = lctx.method_from_name(method)
    return model.session(**params)


@pytest.mark.parametrize("case", CASES["answer_cases"], ids=lambda c: c["name"])
def test_answer_case(shared_model, case):
    with session(shared_model, case["method"]) as s:
        chat = lctx.Conversation(s, chat=False)
        chat.feed_text(case["document"])
        for turn in case["turns"]:
            sp = turn["sampling"]
            sampling = lctx.Sampling(temperature=sp["temperature"], top_k=sp["top_k"], top_p=sp["top_p"],
                                     seed=sp["seed"], stop=turn["stop"])
            assert chat.ask(turn["question"], turn["n_predict"], sampling) == turn["answer"]
        assert [a for _, a in chat.history] == [t["answer"] for t in case["turns"]]


def run_error_case(model, case):
    op = case["op"]
    if op == "load_model":
        lctx.Model(ROOT / case["path"])
    elif op == "method_from_name":
        lctx.method_from_name(case["text"])
    elif op == "feed_tokens":
        with session(model, None) as s:
            s.feed(case["tokens"])
    elif op == "decode_after_feed":
        with session(model, None) as s:
            s.feed_text(case["document"])
            s.decode()
    elif op == "cancel_in_progress":
        seen = []
        with session(model, None, on_progress=lambda stage, done: seen.append(stage) or True) as s:
            try:
                s.feed_text(case["document"])
            finally:
                assert sorted(set(seen)) == case["labels"]
    else:
        pytest.fail(f"unknown op {op}")


@pytest.mark.parametrize("case", CASES["error_cases"], ids=lambda c: c["name"])
def test_error_case(shared_model, case):
    with pytest.raises(lctx.Error) as info:
        run_error_case(shared_model, case)
    assert info.value.kind == case["error"], info.value


def test_progress_labels(shared_model):
    case = CASES["progress_case"]
    seen = []
    on = lambda stage, done: (seen.append(stage) if not seen or seen[-1] != stage else None) and False  # noqa
    with session(shared_model, case["method"], on_progress=on) as s:
        s.feed_text(case["document"])
        s.ask(case["question"], case["n_predict"])
    assert seen == case["labels"]
