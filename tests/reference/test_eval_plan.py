"""bench/eval_plan.py: remaining combinations and their estimated time, worked by hand."""
import math
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import eval_paired  # noqa: E402
import eval_plan  # noqa: E402
from eval_rows import write_results  # noqa: E402


def run_plan(*args, check=True):
    """bench/eval_plan.py ARGS as a command; with `check`, a non-zero exit fails the test."""
    return subprocess.run([sys.executable, str(ROOT / "bench" / "eval_plan.py"), *args], capture_output=True, text=True,
                          check=check)


def row(m, t, L, i, wall, error=None):
    r = {"method": m, "task": t, "length": L, "sample": i, "seed": 42, "score": 0.0, "wall_s": wall}
    if error:
        r["error"] = error
    return r


def test_estimates(tmp_path):
    cur, old = tmp_path / "cur.jsonl", tmp_path / "old.jsonl"
    write_results(cur, [row("reform", "vt", 8192, 0, 10), row("reform", "vt", 8192, 1, 30), row("reform", "vt", 8192, 2, 500, "timed out"),
                row("oracle", "vt", 8192, 0, 7), row("full", "vt", 8192, 0, 20)])
    write_results(old, [row("reform", "vt", 32768, 0, 80), row("full", "vt", 32768, 0, 320)])
    med, _ = eval_plan.times([eval_paired.load(cur), eval_paired.load(old)])
    assert med[("reform", 8192)] == 20          # median of 10 and 30; the error row does not count
    assert eval_plan.estimate(med, "reform", 8192) == (20, False)
    # 20 s -> 80 s over 4x length: exponent 1, so 320 s at 128K.
    t, est = eval_plan.estimate(med, "reform", 131072)
    assert est and abs(t - 320) < 1e-9
    # FULL: 20 s -> 320 s is exponent 2: 5,120 s at 128K; RefreshKV borrows FULL's measured time.
    assert abs(eval_plan.estimate(med, "full", 131072)[0] - 5120) < 1e-9
    assert eval_plan.estimate(med, "refreshkv", 32768) == (320, True)
    # The oracle costs the same at every length; a method never seen has no time.
    assert eval_plan.estimate(med, "oracle", 1048576) == (7, True)
    assert eval_plan.estimate(med, "h2o", 8192) == (None, True)


def test_chunked_methods_grow_linearly(tmp_path):
    cur = tmp_path / "cur.jsonl"
    write_results(cur, [row("h2o", "vt", 8192, 0, 10), row("h2o", "vt", 32768, 0, 100),
                row("infllm", "vt", 8192, 0, 10), row("infllm", "vt", 32768, 0, 100),
                row("reattention", "vt", 8192, 0, 10), row("reattention", "vt", 32768, 0, 100),
                row("reform+refreshkv", "vt", 131072, 0, 300)])
    med, _ = eval_plan.times([eval_paired.load(cur)])
    # h2o's cache is fixed: 100 s x 32 = 3,200 s at 1M, not the power law's 100 x 32^1.66 (31,600 s).
    t, est = eval_plan.estimate(med, "h2o", 1048576)
    assert est and abs(t - 3200) < 1e-9, t
    # Between its lengths, from the nearer one (halfway: the longer): 100 s / 2 at 16K, 10 s x 1.25 at 10K.
    assert abs(eval_plan.estimate(med, "h2o", 16384)[0] - 50) < 1e-9
    assert abs(eval_plan.estimate(med, "h2o", 10240)[0] - 12.5) < 1e-9
    # InfLLM's working cache is fixed too (its block lookups are a small share): 100 s x 4 at 128K.
    assert abs(eval_plan.estimate(med, "infllm", 131072)[0] - 400) < 1e-9
    # ReAttention scores every key per query: the power law stays (exponent log(10)/log(4)).
    t, _ = eval_plan.estimate(med, "reattention", 131072)
    assert abs(t - 100 * 4 ** (math.log(10) / math.log(4))) < 1e-6, t
    # A variant counts as its base method: 300 s x 8 at 1M.
    assert abs(eval_plan.estimate(med, "reform+refreshkv", 1048576)[0] - 2400) < 1e-9


def test_truncation_costs_the_same_past_its_largest_length(tmp_path):
    cur = tmp_path / "cur.jsonl"
    write_results(cur, [row("truncate", "vt", 8192, 0, 5), row("truncate", "vt", 32768, 0, 9),
                row("truncate:budget=1024", "vt", 8192, 0, 3)])
    med, _ = eval_plan.times([eval_paired.load(cur)])
    # What it keeps does not grow: 9 s at 512K as at 32K (a power law would say 9 * 16 = 144 s at least).
    assert eval_plan.estimate(med, "truncate", 524288) == (9, True)
    assert eval_plan.estimate(med, "truncate:budget=1024", 1048576) == (3, True)
    # Below its largest measured length the power law still applies: 5 s -> 9 s over 4x is exponent
    # 0.42, clamped to 1, from 32K's 9 s: 9 / 8 = 1.125 s at 4K.
    t, est = eval_plan.estimate(med, "truncate", 4096)
    assert est and abs(t - 1.125) < 1e-9, t


def test_counts_what_is_left(tmp_path):
    cur = tmp_path / "cur.jsonl"
    write_results(cur, [row("reform", "vt", 8192, 0, 10), row("reform", "cwe", 8192, 0, 10), row("reform", "vt", 8192, 1, 10)])
    out = run_plan(str(cur), "--methods", "reform", "--tasks", "vt,cwe", "--lengths", "8k:3").stdout
    # 2 tasks x 3 samples = 6, 3 done: 3 left at 10 s.
    assert "| reform | 3 x 10 s = 0.0 h | 0.0 |" in out, out


def test_times_come_from_one_backend(tmp_path):
    cur = tmp_path / "cur.jsonl"
    gpu = dict(row("full", "vt", 32768, 1, 5), backend="cuda")
    write_results(cur, [row("full", "vt", 32768, 0, 300), dict(row("full", "vt", 32768, 2, 310), backend="cpu"), gpu])
    rows = eval_paired.load(cur)
    assert eval_plan.times([rows])[0][("full", 32768)] == 305          # the CPU rows only
    assert eval_plan.times([rows], "cuda")[0][("full", 32768)] == 5
    out = run_plan(str(cur), "--methods", "full", "--tasks", "vt", "--lengths", "32k:4").stdout
    # 4 samples, 3 done (the cuda row too): 1 left at the CPU's 305 s.
    assert "| full | 1 x 305 s = 0.1 h | 0.1 |" in out, out


def test_refreshkv_on_fulls_prefill(tmp_path):
    cur = tmp_path / "cur.jsonl"
    timings = {"load": 1, "generate": 1, "tokenize": 1, "feed": 250, "build_index": 0, "decode": 5}
    # A RefreshKV row of its own (300 s, 253 of them before the question: own share 47/300) and one that
    # shared FULL's prefill (its wall 280 s counts the 250 s it did not repeat: own share 30/280).
    write_results(cur, [dict(row("refreshkv", "vt", 32768, 0, 300), timings_s=timings),
                dict(row("refreshkv", "cwe", 32768, 0, 280), shared_s=250.0, prefill_shared_with="full"),
                row("full", "vt", 32768, 0, 290), row("full", "cwe", 32768, 0, 290)])
    med, own = eval_plan.times([eval_paired.load(cur)])
    assert med[("refreshkv", 32768)] == 290
    assert abs(own[("refreshkv", 32768)] - (47 / 300 + 30 / 280) / 2) < 1e-12
    # The plan: tasks vt, cwe, fwe at 2 samples. Missing: refreshkv at (vt,1), (cwe,1), (fwe,0), (fwe,1); FULL at
    # the same four. All four RefreshKV rows run on FULL's prefill at 290 s x own share.
    args = [str(cur), "--methods", "full,refreshkv", "--tasks", "vt,cwe,fwe", "--lengths", "32k:2"]
    out = run_plan(*args).stdout
    t = 290 * (47 / 300 + 30 / 280) / 2
    assert f"| refreshkv | 4 x 290 s (4 on FULL's prefill, {t:.0f} s) = {4 * t / 3600:.1f} h |" in out, out
    # Without FULL in the plan, or with --no-shared-prefill, each RefreshKV row pays its own prefill.
    for extra in (["--methods", "refreshkv"], ["--no-shared-prefill"]):
        out = run_plan(*args, *extra).stdout
        assert "| refreshkv | 4 x 290 s = 0.3 h |" in out, (extra, out)


def test_cpu_seconds_over_cores(tmp_path):
    cur = tmp_path / "cur.jsonl"
    # Two FULL rows recorded their CPU seconds (300 and 340: 150 and 170 s on 2 cores), an older one did not;
    # the ILRe row has none, so its wall time stays its price.
    write_results(cur, [dict(row("full", "vt", 32768, 0, 400), cpu_s=300.0), dict(row("full", "vt", 32768, 1, 420), cpu_s=340.0),
                row("full", "vt", 32768, 2, 380), row("ilre", "vt", 32768, 0, 50)])
    rows = eval_paired.load(cur)
    assert eval_plan.times([rows])[0][("full", 32768)] == 400                  # wall: median of 380, 400, 420
    med = eval_plan.times([rows], cores=2)[0]
    assert med[("full", 32768)] == 160                                         # median of 300/2 and 340/2
    assert med[("ilre", 32768)] == 50
    out = run_plan(str(cur), "--methods", "full", "--tasks", "vt", "--lengths", "32k:5", "--cores", "2").stdout
    assert "| full | 2 x 160 s = 0.1 h | 0.1 |" in out, out
    assert "CPU seconds / 2" in out, out


def test_prices_with_one_cpus_rows(tmp_path):
    cur = tmp_path / "cur.jsonl"
    # The same method and length on a fast CPU (100 and 120 s), a slow one (250 s), and a row that did not record it.
    write_results(cur, [dict(row("ilre", "vt", 131072, 0, 100), cpu="AMD EPYC (family 25 model 17)"),
                dict(row("ilre", "vt", 131072, 1, 120), cpu="AMD EPYC (family 25 model 17)"),
                dict(row("ilre", "cwe", 131072, 0, 250), cpu="AMD EPYC (family 23 model 1)"),
                row("ilre", "qa", 131072, 0, 90)])
    rows = eval_paired.load(cur)
    assert eval_plan.times([rows])[0][("ilre", 131072)] == 110                 # all four: median of 90..250
    assert eval_plan.times([rows], cpu="family 23")[0][("ilre", 131072)] == 250
    assert eval_plan.times([rows], cpu="FAMILY 25")[0][("ilre", 131072)] == 110  # any case: 100 and 120
    assert ("ilre", 131072) not in eval_plan.times([rows], cpu="Xeon")[0]
    base = [str(cur), "--methods", "ilre", "--tasks", "vt,cwe,qa", "--lengths", "128k:2"]
    out = run_plan(*base).stdout
    assert "Priced from rows that ran on: AMD EPYC (family 25 model 17) (2); AMD EPYC (family 23 model 1) (1); " \
           "unrecorded (1)." in out, out
    # 6 combinations, 4 done: 2 left at the slow CPU's 250 s.
    out = run_plan(*base, "--cpu", "family 23").stdout
    assert "| ilre | 2 x 250 s = 0.1 h | 0.1 |" in out, out
    assert "AMD EPYC (family 23 model 1) (1) (only CPUs naming 'family 23')." in out, out


def test_bad_input_is_a_message_not_a_traceback(tmp_path):
    cur = write_results(tmp_path / "cur.jsonl", [row("reform", "vt", 8192, 0, 10)])
    missing = run_plan(str(tmp_path / "none.jsonl"), "--methods", "reform", "--tasks", "vt", "--lengths", "8k:3",
                       check=False)
    assert missing.returncode == 1 and missing.stderr.startswith("eval_plan: cannot read "), missing.stderr
    for lengths in ("8k", "8k:0", "8x:3"):
        r = run_plan(str(cur), "--methods", "reform", "--tasks", "vt", "--lengths", lengths, check=False)
        assert r.returncode == 1 and r.stderr.startswith(f"eval_plan: bad --lengths {lengths!r}"), (lengths, r.stderr)


def test_rows_without_a_full_key_are_skipped(tmp_path):
    # A row with a method but no task (or no length, or no sample) is not a result: it neither counts as done
    # nor prices anything, as in the other eval tools.
    cur = write_results(tmp_path / "cur.jsonl", [row("reform", "vt", 8192, 0, 10),
                                                 {"method": "reform", "length": 8192, "sample": 1, "wall_s": 999},
                                                 {"method": "reform", "task": "vt", "sample": 2, "wall_s": 999}])
    r = run_plan(str(cur), "--methods", "reform", "--tasks", "vt", "--lengths", "8k:3")
    assert "| reform | 2 x 10 s = 0.0 h | 0.0 |" in r.stdout, r.stdout
