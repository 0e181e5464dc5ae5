"""Writes bindings/tests/shared_cases.json: the cases every binding's test
runs (Python, Java, Go, Rust), with the expected answers taken from the C
command line `lctx run` (greedy or seeded sampling, one thread), never from a
binding.

usage: python3 bindings/tests/make_shared_cases.py LCTX_CLI [MODEL.gguf [OUT.json]]
       (MODEL: tests/data/stories260K.gguf; OUT: bindings/tests/shared_cases.json;
       the command line that made the committed file is stored in it, under
       "generated_by"; scripts/test-bindings.sh regenerates the cases into a
       temporary file and fails when they differ from the committed ones)

How a binding runs an "answer" case (bindings/README.md, "Shared cases"):
session with `method` (by registry name; absent: the library default) and
`n_threads` 1, a Conversation without chat template (chat=false) on it,
conversation.feed_text(document), then each turn's conversation.ask(question,
n_predict, sampling with the turn's stop strings): the answer must equal
`answer`. That framing is `lctx run --no-chat`'s: [BOS] document, then
"\\n\\n" + question + "\\n"; a second turn asks with "\\n\\n" + q1 + "\\n" + a1
before it, which is `lctx run --no-chat --question "q1\\na1\\n\\nq2"`.
"""
import json
import pathlib
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

SHORT = ("Lily had a red ball. She played with it in the park every day. One day the ball rolled into the "
         "pond. A kind duck pushed the ball back to Lily. Lily said thank you to the duck.")
# Longer than stories260K's trained context (2048 tokens): REFORM's budgets do not cover it.
LONG_PARTS = ["Tom liked to build towers with blocks.", "The sun was warm and the sky was blue.",
              "Mia found a shiny stone near the river.", "The little dog ran after the cat.",
              "Grandma baked a big apple pie.", "Ben saw a bird sitting on a tree."]


def long_document() -> str:
    out = []
    for i in range(120):
        out.append(" ".join(LONG_PARTS[(i + k) % len(LONG_PARTS)] for k in range(3)))
        if i == 50:
            out.append("The name of the big friendly dragon was Sparky.")
    return "\n".join(out)


def answer_cases():
    long_doc = long_document()
    greedy = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0}
    return [
        {"name": "full_short", "method": "full", "document": SHORT, "turns": [
            {"question": "What did Lily have?", "n_predict": 24, "sampling": greedy, "stop": []}]},
        # The default (REFORM) on an input that fits its budgets: FULL's answer.
        {"name": "default_short_equals_full", "method": None, "document": SHORT, "turns": [
            {"question": "What did Lily have?", "n_predict": 24, "sampling": greedy, "stop": []}]},
        {"name": "reform_long", "method": "reform", "document": long_doc, "turns": [
            {"question": "What was the name of the dragon?", "n_predict": 24, "sampling": greedy, "stop": []}]},
        {"name": "streaming_long", "method": "streaming", "document": long_doc, "turns": [
            {"question": "Who found a shiny stone?", "n_predict": 16, "sampling": greedy, "stop": []}]},
        {"name": "sampled_seeded", "method": "full", "document": SHORT, "turns": [
            {"question": "Where did the ball go?", "n_predict": 24,
             "sampling": {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 7}, "stop": []}]},
        {"name": "stop_string", "method": "full", "document": SHORT, "turns": [
            {"question": "What did Lily have?", "n_predict": 24, "sampling": greedy, "stop": ["."]}]},
        {"name": "conversation_two_turns", "method": "full", "document": SHORT, "turns": [
            {"question": "Who pushed the ball?", "n_predict": 16, "sampling": greedy, "stop": []},
            {"question": "What did Lily say?", "n_predict": 16, "sampling": greedy, "stop": []}]},
    ]


ERROR_CASES = [
    {"name": "missing_model_file", "op": "load_model", "path": "no/such/model.gguf", "error": "io"},
    {"name": "unknown_method_name", "op": "method_from_name", "text": "no-such-method", "error": "invalid_arg"},
    {"name": "token_out_of_vocabulary", "op": "feed_tokens", "tokens": [1, 100000000], "error": "invalid_arg"},
    {"name": "decode_before_question", "op": "decode_after_feed", "document": SHORT, "error": "state"},
    {"name": "cancel_from_progress", "op": "cancel_in_progress", "document": SHORT, "error": "cancelled",
     "labels": ["feed"]},
]

# feed_text, then ask: the labels progress reports, in order, once each.
PROGRESS_CASE = {"name": "progress_labels", "method": "reform", "document": SHORT, "question": "What did Lily have?",
                 "n_predict": 4, "labels": ["feed", "build_index", "select", "recompute"]}


def run_cli(cli, model, method, document, question, n_predict, sampling, tmp):
    doc = tmp / "doc.txt"
    doc.write_text(document, encoding="utf-8")
    cmd = [cli, "run", "-m", model, "--file", str(doc), "--question", question, "-n", str(n_predict), "--no-chat",
           "-t", "1", "--json", "--method", method or "reform",
           "--temp", repr(sampling["temperature"]), "--top-k", str(sampling["top_k"]),
           "--top-p", repr(sampling["top_p"]), "--seed", str(sampling["seed"])]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["answer"]


def rel(path: str) -> str:
    """path relative to the repository when it is inside it."""
    p = pathlib.Path(path).absolute()
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


def cut_at_stop(text, stops):
    cuts = [text.find(s) for s in stops if s and s in text]
    return text[:min(cuts)] if cuts else text


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cli = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else str(ROOT / "tests/data/stories260K.gguf")
    import tempfile
    tmp = pathlib.Path(tempfile.mkdtemp())
    cases = answer_cases()
    for case in cases:
        history = ""
        for turn in case["turns"]:
            # The history goes in the question: "\n\n" + q1 + "\n" + a1 + "\n\n" + q2 + "\n".
            question = history + turn["question"]
            full = run_cli(cli, model, case["method"], case["document"], question, turn["n_predict"],
                           turn["sampling"], tmp)
            turn["answer"] = cut_at_stop(full, turn["stop"])
            history = question + "\n" + turn["answer"] + "\n\n"
        print(f"{case['name']}: {[t['answer'] for t in case['turns']]}", file=sys.stderr)
    by_name = {c["name"]: c["turns"][0]["answer"] for c in cases}
    # The invariant the default rests on: REFORM within its budgets answers as FULL.
    if by_name["default_short_equals_full"] != by_name["full_short"]:
        raise SystemExit("lctx run: the default method (REFORM) and FULL disagree on the short document")
    rel_model = rel(model)
    data = {
        "about": "Cases run by the Python, Java, Go and Rust binding tests; expected answers from `lctx run` "
                 "(see make_shared_cases.py for how a case is run). Regenerate, never edit by hand.",
        "generated_by": "python3 bindings/tests/make_shared_cases.py " + " ".join(
            shlex.quote(a) for a in [rel(cli), str(rel_model)]),
        "model": str(rel_model),
        "n_threads": 1,
        "answer_cases": cases,
        "error_cases": ERROR_CASES,
        "progress_case": PROGRESS_CASE,
    }
    out = pathlib.Path(sys.argv[3]) if len(sys.argv) > 3 else pathlib.Path(__file__).with_name("shared_cases.json")
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
