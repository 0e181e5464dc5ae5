"""bench/run.py's report, replayed from a recorded run: the columns of the
"previous build / f16 KV" table follow what was measured (no "nan" columns
for a run that was not made), and every ratio is the two medians it names."""
import importlib.util
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "docs" / "results" / "bench-avx2-zen3-smollm2-decode-f16.json"


def load_run_py():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def replay(mod, monkeypatch, tmp_path, argv):
    rec = json.loads(RECORDED.read_text())
    queues = {k: list(v) for k, v in rec["runs"].items()}

    def fake_sh(cmd, err=None):
        if any("llama_cpp_bench.py" in c for c in cmd):
            return json.dumps(queues["llama.cpp"].pop(0))
        if "--profile" in cmd:
            return json.dumps(rec["profile"])
        if "--kv" in cmd and cmd[cmd.index("--kv") + 1] == "f16":
            return json.dumps(queues["f16"].pop(0))
        return json.dumps(queues["lctx"].pop(0))

    monkeypatch.setattr(mod, "sh", fake_sh)
    monkeypatch.setattr(mod, "machine", lambda *a, **k: rec["machine"])
    loads = [rec["load_before"], rec["load_after"]]
    monkeypatch.setattr(mod, "loadavg", lambda: loads.pop(0))
    fake_bin = tmp_path / "lctx"
    fake_bin.write_text("")
    fake_model = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fake_model.write_text("")
    out = tmp_path / "report.md"
    monkeypatch.setattr(sys, "argv", ["run.py", "--lctx", str(fake_bin), "-m", str(fake_model), "-o", str(out)] + argv)
    mod.main()
    return rec, out.read_text()


def table(md, heading):
    lines = md.split("\n")
    i = next(n for n, l in enumerate(lines) if l.startswith(heading))
    rows = []
    for l in lines[i + 1:]:
        if l.startswith("|"):
            rows.append([c.strip() for c in l.strip("|").split("|")])
        elif rows:
            break
    return rows


def test_f16_without_previous_build_has_no_empty_columns(monkeypatch, tmp_path, capsys):
    mod = load_run_py()
    rec, md = replay(mod, monkeypatch, tmp_path, ["-t", "2", "-p", "512", "--decode-ctx", "8192", "-r", "2", "--kv-f16"])
    assert "nan" not in md
    rows = table(md, "## lctx with an f16 KV store")
    assert rows[0] == ["measurement", "this build (f32 KV)", "f16 KV", "f32 / f16", "f16 KV / llama.cpp"]
    decode = next(r for r in rows if r[0].startswith("decode after 8192"))
    med = lambda k: statistics.median(v for run in rec["runs"][k] for v in run["decode"]["tok_s"])
    assert float(decode[1]) == round(med("lctx"), 1)
    assert float(decode[2]) == round(med("f16"), 1)
    assert float(re.sub(r"[*x]", "", decode[3])) == round(med("lctx") / med("f16"), 3)
    assert float(re.sub(r"[*x]", "", decode[4])) == round(med("f16") / med("llama.cpp"), 2)
