#!/usr/bin/env python3
"""Side-by-side CPU benchmark of lctx and llama.cpp on the same GGUF.

One command (from the repository root):

    .venv/bin/python bench/run.py            # SmolLM2 Q4_1, all cores, 3 repeats

Each repeat runs `lctx bench` and then bench/llama_cpp_bench.py (llama.cpp
through llama-cpp-python) in fresh processes with the same thread count,
prompt lengths and decode setting, so load from elsewhere hits both sides of a
repeat alike. Reports min/median/max over the repeats and the ratio of the
medians (lctx / llama.cpp), then one `lctx bench --profile` run for the
per-op breakdown and the GEMM share of the FMA peak. Writes a Markdown report
(default docs/results/bench-smollm2.md) and the raw JSON next to it.

The lctx columns run on the CPU (`lctx bench --backend cpu`). `--backend cuda`
adds, in each repeat, `lctx bench --backend cuda` and a section with its
prefill, decode and REFORM encode throughput beside the CPU's; `lctx bench`
reports the backend that actually ran, and where that is the CPU (no device,
no module) the section says so instead of showing CPU figures as cuda's.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sh(cmd, stderr_lines=None, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stderr[-2000:]}")
    if stderr_lines is not None:
        stderr_lines += r.stderr.splitlines()
    return r.stdout


def machine():
    info = {"platform": platform.platform(), "python": platform.python_version()}
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        info["cpu"] = next(l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("model name"))
        flags = next(l for l in cpu.splitlines() if l.startswith("flags")).split()
        info["simd_flags"] = " ".join(f for f in flags if f.startswith(("avx512", "avx2", "fma", "amx", "avx_vnni")))
    except (OSError, StopIteration):
        pass
    info["logical_cpus"] = os.cpu_count()
    try:
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["ram_gib"] = round(int(mem) / 2**20, 1)
    except (OSError, IndexError, ValueError):
        pass
    return info


def loadavg():
    try:
        return Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return ["?"] * 3


def stats(v):
    return (min(v), statistics.median(v), max(v)) if v else (float("nan"),) * 3


def backend_section(name, runs, rows, series, reform):
    """The lctx runs with --backend NAME beside the CPU's (medians). Which
    backend ran comes from each run's JSON: a fallback to the CPU is said in
    words, and its figures are not labelled as NAME's."""
    ran = sorted({r.get("backend", "?") for r in runs["backend"]})
    md = ["", f"## lctx with `--backend {name}` beside the CPU", ""]
    if ran != [name]:
        why = sorted({l for r in runs["backend"] for l in r.get("fallback_lines", [])})
        md += [f"**{name} was unavailable: `lctx bench --backend {name}` fell back to the CPU** (its JSON reported "
               f"backend {', '.join(repr(b) for b in ran)}), so there are no {name} figures. It said:", ""]
        md += [f"    {l}" for l in why] or ["    (no line on stderr)"]
        md.append("")
        print(f"bench/run.py: {name} was unavailable; lctx fell back to the CPU ({', '.join(ran)})", file=sys.stderr)
        return md
    md += [f"Same repeats, interleaved with the CPU runs; `lctx bench --backend {name}` reported backend "
           f"\"{name}\" in every run.", "",
           f"| measurement | CPU (median) | {name} (median) | {name} / CPU |", "|---|---:|---:|---:|"]
    for label, key in rows:
        a, b = stats(series("lctx", key))[1], stats(series("backend", key))[1]
        md.append(f"| {label} | {a:.1f} | {b:.1f} | **{b / a:.2f}x** |")
    for n in [int(x) for x in reform.split(",")] if reform else []:
        enc = lambda k: stats([v for run in runs[k] for e in run.get("reform", []) if e["n_doc"] == n
                               for v in e["tok_s"]])[1]
        a, b = enc("lctx"), enc("backend")
        md.append(f"| REFORM encode {n} tokens (tok/s) | {a:.1f} | {b:.1f} | **{b / a:.2f}x** |")
    return md


# The opt-in lossy arithmetic runs: (runs key, label, JSON field, value when it ran).
BF16_KINDS = [("bf16", "bf16 attention", "attn", "bf16"), ("bf16_all", "bf16 attention + matmuls", "attn", "bf16")]
INT8_KINDS = [("int8", "int8 matmuls", "matmul", "int8")]


def arith_section(runs, rows, series, reform, kinds, title, none_ran):
    """Opt-in lossy arithmetic runs (kinds, e.g. BF16_KINDS) beside the exact
    ones and llama.cpp."""
    kinds = [(k, label) for k, label, field, value in kinds if runs[k] and runs[k][0].get(field) == value]
    md = ["", title, ""]
    if not kinds:
        return md + [none_ran]
    md += ["Same repeats, medians. Ratios: each run over llama.cpp, and over this build's exact (f32) run.", "",
           "| measurement | " + " | ".join(f"{l} | {l} / llama.cpp | {l} / f32" for _, l in kinds) + " |",
           "|---|" + "---:|---:|---:|" * len(kinds)]
    for label, key in rows:
        f, b = stats(series("lctx", key))[1], stats(series("llama.cpp", key))[1]
        cells = []
        for k, _ in kinds:
            a = stats(series(k, key))[1]
            cells.append(f"{a:.1f} | " + (f"**{a / b:.2f}x**" if b == b and b > 0 else "not measured") + f" | {a / f:.3f}x")
        md.append(f"| {label} | " + " | ".join(cells) + " |")
    for n in [int(x) for x in reform.split(",")] if reform else []:
        tok = lambda k: stats([v for run in runs[k] for e in run.get("reform", []) if e["n_doc"] == n for v in e["tok_s"]])[1]
        md.append(f"| REFORM encode {n} tokens (tok/s) | " +
                  " | ".join(f"{tok(k):.1f} | | {tok(k) / tok('lctx'):.3f}x" for k, _ in kinds) + " |")
    return md


def q8_section(runs, series, decode_ctx):
    """Decode with the opt-in q8 KV store against llama.cpp's default f16
    cache and its own q8_0 cache (flash attention on: llama.cpp quantizes V
    only with it)."""
    # With --matmul-int8 too: q8 storage and int8 matmuls together (runs
    # "q8_int8"), the closest to llama.cpp's own arithmetic (it rounds the
    # activations of its 4-bit matmuls to 8 bits).
    both = bool(runs["q8_int8"]) and runs["q8_int8"][0].get("matmul") == "int8"
    md = ["", "## Decode with a q8 KV store (opt-in, lossy: `lctx bench --kv q8`, docs/kv-storage.md)", "",
          "Same repeats, medians. llama.cpp runs its default f16 K/V cache (the table above) and, for the same "
          "storage, its q8_0 K/V cache." + (" The last three columns add int8 matmuls (`--matmul int8`, "
                                            "docs/int8.md) to the q8 store." if both else ""), "",
          "| measurement | lctx q8 | lctx f32 | llama.cpp f16 | llama.cpp q8_0 | lctx q8 / llama.cpp f16 | "
          "lctx q8 / llama.cpp q8_0 |" + (" lctx q8 + int8 | q8 + int8 / llama.cpp f16 | q8 + int8 / llama.cpp q8_0 |"
                                          if both else ""),
          "|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if both else "")]
    q8, f32 = stats(series("q8", "decode"))[1], stats(series("lctx", "decode"))[1]
    l16 = stats(series("llama.cpp", "decode"))[1] if runs["llama.cpp"] else float("nan")
    l8 = stats(series("llama_q8", "decode"))[1] if runs["llama_q8"] else float("nan")
    ratio = lambda a, b: f"**{a / b:.2f}x**" if b == b and b > 0 else "not measured"
    row = (f"| decode after {decode_ctx} tokens (tok/s) | {q8:.1f} | {f32:.1f} | {l16:.1f} | {l8:.1f} | "
           f"{ratio(q8, l16)} | {ratio(q8, l8)} |")
    if both:
        qi = stats(series("q8_int8", "decode"))[1]
        row += f" {qi:.1f} | {ratio(qi, l16)} | {ratio(qi, l8)} |"
    md.append(row)
    pr = lambda k: max((r["peak_rss_mib"] for r in runs[k]), default=float("nan"))
    md.append(f"| peak RSS (MiB) | {pr('q8'):.0f} | {pr('lctx'):.0f} | {pr('llama.cpp'):.0f} | {pr('llama_q8'):.0f} | | |"
              + (f" {pr('q8_int8'):.0f} | | |" if both else ""))
    if runs.get("before_q8"):   # --before: the previous build's q8 decode, in the same repeats
        bq = stats(series("before_q8", "decode"))[1]
        md += ["", "| measurement | lctx q8, this build | lctx q8, previous build | this / previous |",
               "|---|---:|---:|---:|",
               f"| decode after {decode_ctx} tokens (tok/s) | {q8:.1f} | {bq:.1f} | **{q8 / bq:.3f}x** |"]
    return md


def main():
    ap = argparse.ArgumentParser(description="lctx vs llama.cpp, same GGUF, same threads")
    ap.add_argument("-m", "--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-p", "--prompts", default="512,2048,8192")
    ap.add_argument("--decode-ctx", type=int, default=8192)
    ap.add_argument("-n", "--n-decode", type=int, default=32)
    ap.add_argument("-r", "--repeats", type=int, default=3)
    ap.add_argument("--lctx", default=None, help="lctx binary (default $LCTX_BUILD_DIR/tools/lctx, build/release)")
    ap.add_argument("--python", default=None, help="Python with llama-cpp-python (default .venv/bin/python)")
    ap.add_argument("--flash-attn", default="auto", choices=["auto", "on", "off"], help="llama.cpp setting")
    ap.add_argument("--no-llama", action="store_true", help="measure lctx only")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--reform", default="", help="REFORM encode lengths for lctx, e.g. 32768,131072")
    ap.add_argument("--reform-baseline", action="store_true",
                    help="also llama.cpp full prefill of each REFORM length, once (slow: hours at 128K on 2 cores)")
    ap.add_argument("--before", default=None,
                    help="the lctx binary of a previous build: measured in the same repeats, reported as a ratio "
                         "(with --kv-q8, its q8 decode too)")
    ap.add_argument("--kv-f16", action="store_true",
                    help="also lctx with an f16 KV store (lctx bench --kv f16); with --before, the previous build too")
    ap.add_argument("--kv-q8", action="store_true",
                    help="also lctx with a q8 KV store (lctx bench --kv q8: opt-in, lossy, CPU) and llama.cpp with its "
                         "q8_0 K/V cache (flash attention on), decode after --decode-ctx only")
    ap.add_argument("--attn-bf16", action="store_true",
                    help="also lctx with bf16 attention (lctx bench --attn bf16: opt-in, lossy, AVX512_BF16 CPUs), "
                         "REFORM lengths included")
    ap.add_argument("--all-bf16", action="store_true",
                    help="also lctx with bf16 attention and matmuls (--attn bf16 --matmul bf16), the same way")
    ap.add_argument("--matmul-int8", action="store_true",
                    help="also lctx with int8 matmuls (lctx bench --matmul int8: opt-in, lossy, AVX2 CPUs), "
                         "REFORM lengths included")
    ap.add_argument("--backend", default=None,
                    help="also lctx on this backend (e.g. cuda), reported beside the CPU figures")
    ap.add_argument("-o", "--out", default=None,
                    help="report (default docs/results/bench-smollm2.md for SmolLM2, bench-<model file stem> otherwise)")
    args = ap.parse_args()

    build = Path(os.environ.get("LCTX_BUILD_DIR", ROOT / "build" / "release"))
    lctx = Path(args.lctx) if args.lctx else (build if build.is_absolute() else ROOT / build) / "tools" / "lctx"
    if not lctx.exists():
        sys.exit(f"{lctx} not found: build lctx first (scripts/setup.sh) or pass --lctx")
    py = args.python or str(ROOT / ".venv" / "bin" / "python")
    if not Path(py).exists():
        py = sys.executable
    if not Path(args.model).exists():
        sys.exit(f"model {args.model} not found (scripts/fetch-models.sh)")
    common = ["-m", args.model, "-t", str(args.threads), "-p", args.prompts, "--decode-ctx", str(args.decode_ctx),
              "-n", str(args.n_decode), "-r", "1"]
    prompts = [int(x) for x in args.prompts.split(",")]

    load_before = loadavg()
    runs = {"lctx": [], "llama.cpp": [], "before": [], "f16": [], "before_f16": [], "backend": [], "bf16": [], "bf16_all": [],
            "int8": [], "q8": [], "llama_q8": [], "q8_int8": [], "before_q8": []}
    other = args.backend if args.backend and args.backend != "cpu" else None
    for r in range(args.repeats):
        print(f"repeat {r + 1}/{args.repeats}: lctx", file=sys.stderr, flush=True)
        reform = ["--reform", args.reform] if args.reform else []
        runs["lctx"].append(json.loads(sh([str(lctx), "bench", "--backend", "cpu"] + common + reform)))
        if other:
            print(f"repeat {r + 1}/{args.repeats}: lctx --backend {other}", file=sys.stderr, flush=True)
            err = []
            runs["backend"].append(json.loads(sh([str(lctx), "bench", "--backend", other] + common + reform, err)))
            # the registry's line when the backend could not run (lctx bench prints it once per run)
            runs["backend"][-1]["fallback_lines"] = [l for l in err if f"backend '{other}'" in l]
        if args.before:
            print(f"repeat {r + 1}/{args.repeats}: lctx (previous build)", file=sys.stderr, flush=True)
            runs["before"].append(json.loads(sh([args.before, "bench", "--backend", "cpu"] + common)))
        if args.kv_f16:
            print(f"repeat {r + 1}/{args.repeats}: lctx (f16 KV)", file=sys.stderr, flush=True)
            runs["f16"].append(json.loads(sh([str(lctx), "bench", "--backend", "cpu", "--kv", "f16"] + common)))
            if args.before:
                print(f"repeat {r + 1}/{args.repeats}: lctx (previous build, f16 KV)", file=sys.stderr, flush=True)
                runs["before_f16"].append(json.loads(sh([args.before, "bench", "--backend", "cpu", "--kv", "f16"] + common)))
        if args.kv_q8:
            dec = ["-m", args.model, "-t", str(args.threads), "-p", "64", "--decode-ctx", str(args.decode_ctx), "-n",
                   str(args.n_decode), "-r", "1"]
            print(f"repeat {r + 1}/{args.repeats}: lctx (q8 KV)", file=sys.stderr, flush=True)
            runs["q8"].append(json.loads(sh([str(lctx), "bench", "--backend", "cpu", "--kv", "q8"] + dec)))
            if args.before:
                print(f"repeat {r + 1}/{args.repeats}: lctx (previous build, q8 KV)", file=sys.stderr, flush=True)
                runs["before_q8"].append(json.loads(sh([args.before, "bench", "--backend", "cpu", "--kv", "q8"] + dec)))
            if args.matmul_int8:
                print(f"repeat {r + 1}/{args.repeats}: lctx (q8 KV, int8 matmuls)", file=sys.stderr, flush=True)
                runs["q8_int8"].append(json.loads(sh([str(lctx), "bench", "--backend", "cpu", "--kv", "q8", "--matmul",
                                                      "int8"] + dec)))
            if not args.no_llama:
                print(f"repeat {r + 1}/{args.repeats}: llama.cpp (q8_0 KV)", file=sys.stderr, flush=True)
                runs["llama_q8"].append(json.loads(sh([py, str(ROOT / "bench" / "llama_cpp_bench.py"), "--flash-attn",
                                                       "on", "--kv-type", "q8_0"] + dec)))
        if args.attn_bf16:
            print(f"repeat {r + 1}/{args.repeats}: lctx (bf16 attention)", file=sys.stderr, flush=True)
            runs["bf16"].append(json.loads(sh([str(lctx), "bench", "--backend", "cpu", "--attn", "bf16"] + common + reform)))
        if args.all_bf16:
            print(f"repeat {r + 1}/{args.repeats}: lctx (bf16 attention and matmuls)", file=sys.stderr, flush=True)
            runs["bf16_all"].append(json.loads(sh([str(lctx), "bench", "--backend", "cpu", "--attn", "bf16", "--matmul",
                                                   "bf16"] + common + reform)))
        if args.matmul_int8:
            print(f"repeat {r + 1}/{args.repeats}: lctx (int8 matmuls)", file=sys.stderr, flush=True)
            runs["int8"].append(json.loads(sh([str(lctx), "bench", "--backend", "cpu", "--matmul", "int8"] + common +
                                              reform)))
        if not args.no_llama:
            print(f"repeat {r + 1}/{args.repeats}: llama.cpp", file=sys.stderr, flush=True)
            runs["llama.cpp"].append(json.loads(sh([py, str(ROOT / "bench" / "llama_cpp_bench.py"), "--flash-attn",
                                                    args.flash_attn] + common)))
    baseline = {}
    if args.reform and args.reform_baseline and not args.no_llama:
        for n in [int(x) for x in args.reform.split(",")]:
            print(f"llama.cpp full prefill of {n} tokens (REFORM baseline)", file=sys.stderr, flush=True)
            res = json.loads(sh([py, str(ROOT / "bench" / "llama_cpp_bench.py"), "-m", args.model, "-t",
                                 str(args.threads), "-p", str(n), "--decode-ctx", "0", "-r", "1"]))
            baseline[n] = res["prefill"][0]["tok_s"][0]
    profile = None
    if not args.no_profile:
        print("profile run (lctx)", file=sys.stderr, flush=True)
        profile = json.loads(sh([str(lctx), "bench", "--backend", "cpu", "--profile"] + common))
    load_after = loadavg()

    def series(engine, key):
        out = []
        for run in runs[engine]:
            if key == "decode":
                out += run.get("decode", {}).get("tok_s", [])
            else:
                out += next(p["tok_s"] for p in run["prefill"] if p["n_prompt"] == key)
        return out

    rows = [(f"prefill {p} tokens (tok/s)", p) for p in prompts]
    if args.decode_ctx > 0:
        rows.append((f"decode after {args.decode_ctx} tokens (tok/s)", "decode"))
    table = []
    for label, key in rows:
        a = stats(series("lctx", key))
        b = stats(series("llama.cpp", key)) if not args.no_llama else (float("nan"),) * 3
        table.append((label, a, b, a[1] / b[1] if b[1] == b[1] and b[1] > 0 else float("nan")))
    rss = (max(r["peak_rss_mib"] for r in runs["lctx"]),
           max((r["peak_rss_mib"] for r in runs["llama.cpp"]), default=float("nan")))

    m = machine()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    f3 = lambda t: f"{t[0]:.1f} / {t[1]:.1f} / {t[2]:.1f}"
    against = "" if args.no_llama else " vs llama.cpp"
    md = [f"# lctx{against}: {Path(args.model).name}, {args.threads} threads", "",
          f"Generated by `bench/run.py` on {now}; {args.repeats} repeats, each a fresh `lctx bench`"
          + ("" if args.no_llama else " and a fresh llama.cpp process (same GGUF, same thread count")
          + (" (" if args.no_llama else ", ") + "random token ids, logits of the last token only).", ""]
    if args.no_llama:   # lctx only: no llama.cpp columns
        md += ["| measurement | lctx min / median / max |", "|---|---|"]
        md += [f"| {label} | {f3(a)} |" for label, a, _, _ in table]
    else:
        md += ["| measurement | lctx min / median / max | llama.cpp min / median / max | lctx / llama.cpp (medians) |",
               "|---|---|---|---|"]
        md += [f"| {label} | {f3(a)} | {f3(b)} | **{ratio:.2f}x** |" for label, a, b, ratio in table]
    for n in [int(x) for x in args.reform.split(",")] if args.reform else []:
        a = stats([v for run in runs["lctx"] for e in run.get("reform", []) if e["n_doc"] == n for v in e["tok_s"]])
        b = baseline.get(n)
        if args.no_llama:
            md.append(f"| REFORM encode {n} tokens (tok/s) | {f3(a)} |")
            continue
        md.append(f"| REFORM encode {n} tokens vs llama.cpp full prefill (tok/s) | {f3(a)} | "
                  + (f"{b:.1f} (one run) | **{a[1] / b:.2f}x** |" if b else "not measured | |"))
    md.append(f"| peak RSS (MiB) | {rss[0]:.0f} |" if args.no_llama else
              f"| peak RSS (MiB) | {rss[0]:.0f} | {rss[1]:.0f} (Python process) | |")
    both = bool(args.before and args.kv_f16)   # then the previous build runs with an f16 store too
    if args.before or args.kv_f16:
        # Columns for what ran: (header, value of a row's medians, peak RSS cell).
        llama = not args.no_llama
        med = lambda engine, key: stats(series(engine, key))[1]
        pr = lambda k: f"{max((r['peak_rss_mib'] for r in runs[k]), default=float('nan')):.0f}"
        cols = [("this build (f32 KV)", lambda k: f"{med('lctx', k):.1f}", pr("lctx"))]
        if args.before:
            cols += [("previous build", lambda k: f"{med('before', k):.1f}", pr("before")),
                     ("this / previous", lambda k: f"**{med('lctx', k) / med('before', k):.3f}x**", "")]
        if args.kv_f16:
            cols += [("f16 KV", lambda k: f"{med('f16', k):.1f}", pr("f16")),
                     ("f32 / f16", lambda k: f"{med('lctx', k) / med('f16', k):.3f}x", "")]
            if llama:   # llama.cpp's cache is f16 by default: the like-for-like ratio
                cols.append(("f16 KV / llama.cpp", lambda k: f"**{med('f16', k) / med('llama.cpp', k):.2f}x**", ""))
        if both:
            cols += [("previous build, f16 KV", lambda k: f"{med('before_f16', k):.1f}", pr("before_f16")),
                     ("f16: this / previous", lambda k: f"**{med('f16', k) / med('before_f16', k):.3f}x**", "")]
        title = " and ".join(t for t, on in (("against its previous build", args.before),
                                              ("with an f16 KV store", args.kv_f16)) if on)
        md += ["", f"## lctx {title}", "",
               "Same repeats (interleaved with the runs above), medians; each ratio column divides the two "
               "medians it names (above 1: the first named is faster).", "",
               "| measurement | " + " | ".join(c[0] for c in cols) + " |",
               "|---|" + "---:|" * len(cols)]
        for label, key in rows:
            md.append(f"| {label} | " + " | ".join(c[1](key) for c in cols) + " |")
        md.append("| peak RSS (MiB) | " + " | ".join(c[2] for c in cols) + " |")
        if args.before:
            md.append(f"\nprevious build: `{args.before}` ({runs['before'][0]['build']})")
    if args.kv_q8 and args.decode_ctx > 0:
        md += q8_section(runs, series, args.decode_ctx)
    if args.attn_bf16 or args.all_bf16:
        md += arith_section(runs, rows, series, args.reform, BF16_KINDS,
                            "## lctx with bf16 arithmetic (opt-in, lossy: `lctx bench --attn bf16 [--matmul bf16]`, "
                            "docs/bf16.md)", "This CPU has no AVX512_BF16: the runs measured f32 (the library's fallback).")
    if args.matmul_int8:
        md += arith_section(runs, rows, series, args.reform, INT8_KINDS,
                            "## lctx with int8 matmuls (opt-in, lossy: `lctx bench --matmul int8`, docs/int8.md)",
                            "This CPU runs no AVX2: the runs measured f32 (the library's fallback).")
    if other:
        md += backend_section(other, runs, rows, series, args.reform)
    md += ["", "## Machine", ""]
    for k, v in m.items():
        md.append(f"- {k}: {v}")
    md.append(f"- lctx: {runs['lctx'][0]['build']} (SIMD variant {runs['lctx'][0]['simd']})")
    if runs["llama.cpp"]:
        ll = runs["llama.cpp"][0]
        md.append(f"- llama.cpp: {ll['engine']}; {ll['system_info']}; settings {json.dumps(ll['settings'])}")
    md.append(f"- load average (1/5/15 min) before: {' '.join(load_before)}, after: {' '.join(load_after)} "
              "(other work on the machine shows up here; repeats interleave the two engines)")
    if profile and "profile" in profile:
        pr = profile["profile"]
        bw = profile.get("read_bandwidth_gb_s")
        md += ["", "## Where lctx spends its time (`lctx bench --profile`, one run)", "",
               f"Measured FMA peak (f32, all threads, tiny register-only loop): {profile['fma_peak_gflops']:.0f} GFLOP/s."
               + (f" Measured read bandwidth (all threads, 256 MiB buffer): {bw:.1f} GB/s." if bw else ""), ""]
        keys = [k for k in pr if k.startswith("prefill_")] + (["decode"] if "decode" in pr else [])
        ops = [k for k in pr[keys[0]]["seconds"] if k not in ("total", "tokens")]
        md.append("| op | " + " | ".join(keys) + " |")
        md.append("|---|" + "---|" * len(keys))
        for op in ops:
            cells = []
            for k in keys:
                s = pr[k]["seconds"]
                cells.append(f"{s[op]:.3f} s ({100 * s[op] / s['total']:.0f}%)")
            md.append(f"| {op} | " + " | ".join(cells) + " |")
        md.append("| total | " + " | ".join(f"{pr[k]['seconds']['total']:.3f} s" for k in keys) + " |")
        md.append("")
        for k in keys:
            if k.startswith("prefill_"):
                line = (f"- {k}: matmuls at {pr[k]['matmul_gflops']:.0f} GFLOP/s = "
                        f"{100 * pr[k]['matmul_peak_fraction']:.0f}% of the FMA peak")
                if "attention_gflops" in pr[k]:
                    line += (f"; attention at {pr[k]['attention_gflops']:.0f} GFLOP/s = "
                             f"{100 * pr[k]['attention_peak_fraction']:.0f}% (the pairs attended: causal, inside any sliding window)")
                md.append(line)
            else:
                line = f"- decode: the weight matrices stream at {pr[k]['weight_gb_s']:.1f} GB/s"
                if "kv_gb_s" in pr[k]:
                    line += f", the KV cache at {pr[k]['kv_gb_s']:.1f} GB/s"
                    if bw:
                        line += f" ({100 * pr[k]['kv_gb_s'] / bw:.0f}% of the read bandwidth)"
                md.append(line)
    if not args.reform:
        md += ["", "REFORM encode throughput is not in this run: `bench/run.py --reform 32768,131072 "
               "[--reform-baseline]` adds it (see bench/README.md).", ""]
    stem = Path(args.model).name.split(".")[0].lower()
    default_name = "bench-smollm2.md" if stem.startswith("smollm2") else f"bench-{stem}.md"
    out = Path(args.out) if args.out else ROOT / "docs" / "results" / default_name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md))
    out.with_suffix(".json").write_text(json.dumps({"runs": runs, "profile": profile, "machine": m, "reform_baseline": baseline,
                                                     "load_before": load_before, "load_after": load_after}, indent=1))
    print("\n".join(md))


if __name__ == "__main__":
    main()
