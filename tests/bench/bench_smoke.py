#!/usr/bin/python3
"""Smoke test of one benchmark script: the benchmarks are run by hand, rarely, so nothing else
notices when a tool's output changes under them (train_bench.sh once failed on the thousands
separators of loom-train's log line, unnoticed).

  bench_smoke.py SOURCE_DIR BUILD_DIR SCRIPT [--tree TREE] [--work DIR]

SCRIPT is a path under bench/ (train_bench.sh, gpu/run.sh). The script is read from TREE (default
SOURCE_DIR; a test points it at a copy with a planted fault) and run with TREE as the repository root.
Every script is first parsed: bash -n and shellcheck for .sh, py_compile for .py. Then:
  - bench/*.sh, bench/*.py: a RECIPE below runs the script on tiny inputs (sizes through the
    scripts' own knobs), under a timeout, and requires exit 0 and its summary lines (regular
    expressions over its output and over the log it appends to, redirected by LOOM_BENCH_LOG).
    A helper that another script runs is covered by that script's recipe (COVERED_BY). A script
    with neither fails: every benchmark must run here.
  - bench/gpu/*, bench/hf/*: parsed only, unless they have a CPU path (a RECIPE entry, e.g.
    gpu/make_packed.py, hf/make_fixture.sh).
Exit 0 when everything passed; else 1, and the first line of stderr says which check failed.
"""
import argparse
import json
import os
import pathlib
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 150


class Run:
    """One invocation: argv and environment (strings with {S} the script, {B} the build folder,
    {W} the scratch folder, {T} the tree, {P} Debian's python3), the output's required lines, the
    log's, files that must exist afterwards, and a setup(work, tree) that writes its inputs."""

    def __init__(self, argv, env=None, out=(), log=(), files=(), setup=None):
        self.argv, self.env, self.out, self.log, self.files, self.setup = argv, env or {}, out, log, files, setup


def small_texts(work, tree):
    """The first lines of the English and Japanese corpora, as two small .txt inputs."""
    for name, src, n in (("en", "tests/data/botchan.txt", 200), ("ja", "tests/data/wagahaiwa_nekodearu.txt", 40)):
        lines = (tree / src).read_text(encoding="utf-8").splitlines(keepends=True)
        (work / f"{name}.txt").write_text("".join(lines[:n]), encoding="utf-8")


def tang_checkout(work, tree):
    """A chinese-poetry checkout of two files in its layout (tang_corpus.py reads files in N order)."""
    d = work / "poetry" / "全唐诗"
    d.mkdir(parents=True)
    (d / "poet.tang.1000.json").write_text('[{"paragraphs": ["白日依山盡，", "黃河入海流。"]}]', encoding="utf-8")
    (d / "poet.tang.0.json").write_text('[{"paragraphs": ["床前明月光，", "疑是地上霜。"]}, {"paragraphs": []}]',
                                        encoding="utf-8")


ROTARY = ("loom::cuda::(anonymous namespace)::rotary_kernel_vec8(__nv_bfloat16 const*, long, float const*, "
          "float const*, __nv_bfloat16*, long, long, long, long, float, float*)")
COPY_ROWS = ("void loom::cuda::(anonymous namespace)::copy_rows_kernel<uint4, __nv_bfloat16>(char const*, long, "
             "char*, long, long, long, float*)")


def chrome_trace(work, tree):
    """A Kineto trace of one step (times in us) on the compute stream 7 and a side stream 113:
    - 100-400 a GEMM launched by aten::mm at 20; the thread then syncs (410-460) and allocates
      (aten::empty 470-550) and launches flash attention at 570 (a cpu_op inside it), which runs
      600-800: a 0.20 ms gap the host caused, 0.54 ms after its previous launch;
    - a fill (800-850), then an rmsnorm launched at 630 that waits for AdamW on stream 113
      (850-1290) and runs 1300-1400: a 0.45 ms gap under the other stream's kernel;
    - rotary, copy_rows, rotary, copy_rows 50 us apart (two gaps of one pair), then SwiGLU's
      backward 2000-2920 (920 us); a host-to-device copy on stream 8."""
    ev = [("user_annotation", "ProfilerStep#2", 1, 0, 3000, {}),
          ("user_annotation", "forward_backward", 1, 5, 2900, {}),
          ("cpu_op", "aten::mm", 1, 10, 50, {}),
          ("cuda_runtime", "cudaStreamSynchronize", 1, 410, 50, {"correlation": 12}),
          ("cpu_op", "aten::empty", 1, 470, 80, {}),
          ("cpu_op", "aten::_flash_attention_forward", 1, 560, 30, {}),
          ("cpu_op", "aten::fill_", 1, 595, 12, {}),
          ("cuda_runtime", "cudaStreamWaitEvent", 1, 620, 3, {"correlation": 22}),
          ("gpu_memcpy", "Memcpy HtoD", 8, 50, 20, {"correlation": 30, "stream": 8})]
    kernels = [(11, 20, "sm90_xmma_gemm_bf16", 7, 100, 300),
               (13, 570, "flash_fwd_kernel", 7, 600, 200),
               (14, 600, "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                         "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
                7, 800, 50),
               (15, 610, "loom::cuda::(anonymous namespace)::adamw_kernel(loom::cuda::(anonymous namespace)::Batch, "
                         "loom::cuda::(anonymous namespace)::Scalars, float const*, float const*)", 113, 850, 440),
               (16, 630, "void loom::cuda::(anonymous namespace)::rmsnorm_fwd<__nv_bfloat16>(__nv_bfloat16 const*, "
                         "__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, float*, long, "
                         "float, float*)", 7, 1300, 100),
               (17, 1450, ROTARY, 7, 1500, 50), (18, 1590, COPY_ROWS, 7, 1600, 50),
               (19, 1690, ROTARY, 7, 1700, 50), (20, 1790, COPY_ROWS, 7, 1800, 50),
               (21, 1990, "loom::cuda::(anonymous namespace)::swiglu_bwd_vec8(__nv_bfloat16 const*, __nv_bfloat16 "
                          "const*, __nv_bfloat16 const*, long, __nv_bfloat16*, __nv_bfloat16*, long, long, long, "
                          "float*, float*)", 7, 2000, 920)]
    for corr, launch, name, stream, ts, dur in kernels:
        ev.append(("cuda_runtime", "cudaLaunchKernel", 1, launch, 10 if corr == 11 else 5, {"correlation": corr}))
        ev.append(("kernel", name, stream, ts, dur, {"correlation": corr, "stream": stream}))
    events = [{"ph": "X", "cat": c, "name": n, "pid": 0, "tid": t, "ts": ts, "dur": d, "args": a}
              for c, n, t, ts, d, a in ev]
    (work / "trace.json").write_text(json.dumps({"traceEvents": events}))


def trace_summary_text(work, tree):
    """chrome_trace's trace as trace_summary.py sums it up, in summary.txt."""
    chrome_trace(work, tree)
    with open(work / "summary.txt", "w", encoding="utf-8") as out:
        subprocess.run([sys.executable, str(tree / "bench/gpu/trace_summary.py"), str(work / "trace.json")],
                       stdout=out, check=True, timeout=TIMEOUT_S)


ROW = r"[0-9.]+"
RECIPES = {
    "train_bench.sh": [Run(["bash", "{S}", "{B}"], {"STEPS": "3", "HIDDEN": "64", "LAYERS": "1", "SEQ_LEN": "64"},
                           out=[rf"^loom-train {ROW} tokens/s .* ratio {ROW}x \(masked {ROW}x; [0-9]+ parameters each\)$"],
                           log=[r"^## loom-train vs python3-torch on CPU", rf"^- ratio loom-train / python3-torch: {ROW}x"])],
    "dist_bench.sh": [Run(["bash", "{S}", "{B}"], {"STEPS": "3", "WORLDS": "2"},
                          out=[rf"^W=2 zero1=-1: {ROW} tokens/s$"],
                          log=[rf"^\| 2 \| {ROW} \| {ROW} \| {ROW}x \|$"])],
    "pack_bench.sh": [Run(["bash", "{S}", "{B}", "0.002"], {"RUNS": "1"},
                          out=[rf"^\| `cp FILE /dev/shm/` / `pack --seq-len 2048 --strategy bestfit` \| {ROW} \| {ROW} \| "
                               rf"{ROW} \| {ROW} \| 0.3 \|$"],
                          log=[r"^### loom-pack throughput against cat and cp", rf"^\| `cat FILE > /dev/null` / .* \| {ROW} \| 0.7 \|$"])],
    "short_docs_bench.sh": [Run(["bash", "{S}", "{B}", "0"],
                                {"RUNS": "1", "FILES": "4", "DOC_LINES": "200", "PIPE_RUNS": "1", "PACK_MB": "1"},
                                out=[r"tang\.bin: 200 documents, the same ids as spm_encode$",
                                     r"^\| tang: loom-tokenize --threads 1 / spm_encode, [0-9]+ B of documents \|",
                                     r"^- 4 files of [0-9]+ bytes; 1 runs from scratch:",
                                     rf"^\| `cp` / `pack --seq-len 2048 --strategy bestfit` \| .* \| {ROW} \| 0.5 \|$"])],
    "tokenize_bench.sh": [Run(["bash", "{S}", "{B}", "1", "1"], {"INPUTS": "{W}/en.txt {W}/ja.txt"}, setup=small_texts,
                              out=[r"^- input: .*; [1-9][0-9]* bytes of documents, [1-9][0-9]* tokens$",
                                   rf"^\| loom-tokenize --threads 1 \(loom's encoder\) \| {ROW} \| {ROW} \| [1-9][0-9]* \|",
                                   rf"^Ratios: loom \([0-9]+ threads\) / \(a\) = {ROW}x",
                                   rf"^ratio loom/libsentencepiece {ROW}x$"],
                              log=[r"^## tokenize — "])],
    # Three lines of each corpus, two copies: every section, the identical-signatures checks, the verdicts.
    "dedup_bench.sh": [Run(["bash", "{S}", "{B}", "0"], {"RUNS": "1", "COPIES": "2", "LINES": "20", "DOC_LINES": "100"},
                           out=[r"^- check: loom-dedup against tests/dedup/minhash_ref\.py: ok [0-9]+ documents, 112 hashes; "
                                r"the peer against loom-dedup: identical signatures: [0-9]+ documents x 112 hashes$",
                                rf"^\| loom-dedup --stage signatures --threads 1 / peer, 1 process \| {ROW} \(",
                                r"^- signatures: identical \(loom-dedup's",
                                rf"^\| loom-dedup --threads 1 \(exact \+ near \+ apply\) / loom-tokenize --threads 1 \| {ROW} \(",
                                r"^- removed: [0-9]+ exact and [0-9]+ near of [0-9]+ documents",
                                rf"^\| signatures per core >= 10x the numpy peer \| {ROW}x \| {ROW}x \| (met|NOT met) \|$",
                                rf"^\| end to end per core >= loom-tokenize \(tokens/s\) \| {ROW}x \| {ROW}x \| (met|NOT met) \|$"],
                           log=[r"^## loom-dedup against the numpy MinHash peer and loom-tokenize"])],
    "dedup_peer.py": [Run(["{P}", "{S}", "selftest"], out=[r"^selftest ok: numpy XXH64 checked against python3-xxhash"])],
    "tokenize_rss.sh": [Run(["bash", "{S}", "{B}", "0.002", "2"], {"SMALL_GB": "0.001", "SCRATCH": "{W}"},
                            out=[rf"^peak RSS at 0.002 GB / at 0.001 GB: {ROW}$"])],
    "tokenize_scaling.sh": [Run(["bash", "{S}", "{B}", "{W}/out", "2"],
                                {"SIZE_MB": "0.2", "REPEAT": "1", "REPEAT1": "1", "SCRATCH": "{W}", "LOOP": "100000",
                                 "MODEL": "data_samples/spm_2k.model",
                                 "MANY": "4"},
                                # the last cells read loom-tokenize's log: its pipeline and thread timings
                                out=[r"^\| en, [0-9.]+ MB \| [0-9.]+ s \| [0-9.]+ s \| [0-9.]+x \|.* \| [0-9.]+x \([0-9.]+ / "
                                     r"[0-9.]+ s; load [0-9.]+ s\) \| [0-9.]+ \+ [0-9.]+ / [0-9.]+ \+ [0-9.]+ \| [0-9]+ / [0-9]+ MiB \|$",
                                     r"^- the \.bin of 2 threads equals the one of 1 thread for every input$"],
                                files=["{W}/out/tokenize_scaling.md"])],
    "tokenize_peer.py": [Run(["{P}", "{S}", "docs", "{W}/en.txt", "{W}/en.docs"], setup=small_texts, out=[r"^[0-9]+$"]),
                         Run(["{P}", "{S}", "internlm", "{T}/tests/data/internlm_v7.model", "{W}/en.txt", "{W}/en.bin"],
                             files=["{W}/en.bin", "{W}/en.bin.meta"])],
    "tang_corpus.py": [Run(["{P}", "{S}", "{W}/poetry", "{W}/tang.txt"], setup=tang_checkout,
                           out=[r"tang\.txt: 2 poems, [0-9]+ bytes$"], files=["{W}/tang.txt"])],
    "fp8_quality_plot.py": [Run(["{P}", "{S}", "{T}/bench/data/fp8_quality_bf16.jsonl",
                                 "{T}/bench/data/fp8_quality_fp8.jsonl", "{W}/plot.png"],
                                out=[r"^wrote .*plot\.png$"], files=["{W}/plot.png"])],
    "zero_table.py": [Run(["{P}", "{S}", "{B}/trainer/loom-train", "0.00947", "--worlds", "8"],
                          out=[r"^\| 8 \| ZeRO-3 \| [0-9.]+ GB \| (yes|no)", r"^compute per step: "])],
    "gpu/make_packed.py": [Run(["{P}", "{S}", "{W}/p.bin", "--seq-len", "64", "--packs", "4", "--vocab", "1000"],
                               out=[r'^\{"docs": "random", "packs": 4, "seq_len": 64,'], files=["{W}/p.bin.meta"]),
                           Run(["{B}/packer/loom-pack", "verify", "--deep", "{W}/p.bin"])],
    # A 2-step demo checkpoint, then the export and the two logit dumps, which must be identical.
    "hf/make_fixture.sh": [Run(["{B}/tokenize/loom-tokenize", "--model", "data_samples/spm_2k.model", "--output-dir",
                                "{W}/tok", "data_samples/neko_head.jsonl.gz"]),
                           Run(["{B}/packer/loom-pack", "pack", "--seq-len", "256", "--seed", "1", "--output-dir",
                                "{W}/data/train/neko", "{W}/tok/neko_head.bin"]),
                           Run(["{B}/trainer/loom-train", "--config", "configs/demo.ini", "--job.run_dir={W}/run",
                                "--data.train_folder={W}/data/train", "--data.valid_folder=", "--data.total_steps=2",
                                "--job.tensorboard=false"], files=["{W}/run/checkpoints/step_2"]),
                           Run(["bash", "{S}", "{W}/run/checkpoints/step_2", "data_samples/spm_2k.model", "{W}/fixture", "{B}"],
                               {"LOOM_HF_NEW_TOKENS": "4"},
                               out=[r"the dumps from the checkpoint and from its export are identical$"],
                               files=["{W}/fixture/hf/config.json"])],
    "gpu/trace_summary.py": [Run(["{P}", "{S}", "{W}/trace.json"], setup=chrome_trace,
                                 out=[r"^  gemm +0\.30 ms", r"^kernel launches per step: 10$",
                                      r"^== idle on the busiest stream \(7\): 1\.05 ms/step in 7 gaps/step",
                                      r"^  while idle, ms a step \(the first two may overlap\): other streams busy 0\.44 "
                                      r"\(adamw_kernel 0\.44\); before the next kernel's launch returned \(host late\) "
                                      r"0\.51; neither 0\.10$",
                                      r"^  pair 2 x 0\.050 ms = 0\.10 ms/step: rotary_kernel_vec8 -> "
                                      r"copy_rows_kernel<uint4, __nv_bfloat16>$",
                                      # the cross-stream wait: queued in time, under AdamW on stream 113
                                      r"^  gap 1: 0\.450 ms vectorized_elementwise_kernel<4, FillFunctor<float>, .* -> "
                                      r"rmsnorm_fwd<__nv_bfloat16>; launched by \(no cpu op\) in forward_backward, "
                                      r"queued 0\.22 ms before the gap$",
                                      r"^  gap 1 other streams: busy 0\.44 ms of it: adamw_kernel 0\.44 ms$",
                                      r"^  gap 1 host: the host launched it in time; CUDA calls in the gap: none$",
                                      # the host's gap: the launching thread's ops between its launches
                                      r"^  gap 2: 0\.200 ms sm90_xmma_gemm_bf16 -> flash_fwd_kernel; launched by "
                                      r"aten::_flash_attention_forward in forward_backward, launched \+0\.17 ms",
                                      r"^  gap 2 other streams: idle$",
                                      r"^  gap 2 host: thread 1, 0\.54 ms since its previous launch: forward_backward "
                                      r"0\.37 ms \(of its 2\.90\), aten::empty 0\.08 ms \(of its 0\.08\), "
                                      r"cudaStreamSynchronize 0\.05 ms \(of its 0\.05\), aten::mm 0\.03 ms \(of its "
                                      r"0\.05\); CUDA calls in the gap: cudaStreamSynchronize 0\.05 ms, cudaLaunchKernel "
                                      r"0\.01 ms$"])],
    # The bound table from the summary of that trace: SwiGLU's backward moves 5 x 16384 x 5632 bf16
    # (1b) or 5 x 4096 x 11008 (7b): 0.3076 or 0.1503 ms at 3 TB/s, against 0.92 ms measured.
    "gpu/step_ceilings.py": [Run(["{P}", "{S}", "--preset", "1b", "--summary", "{W}/summary.txt", "--copy-tbps", "3"],
                                 setup=trace_summary_text,
                                 out=[r"^\| swiglu bwd \| .* \| 1 \| 0\.92 \| 0\.31 \| 0\.92 \| 2\.99 \|$",
                                      r"^\| rotary \| .* \| 2 \| 0\.29 \| 0\.10 \| 0\.10 \| 1\.05 \|$",
                                      r"^\| copy_rows \| .* \| 2 \| 0\.27 \| 0\.09 \| 0\.10 \| 1\.12 \|$",
                                      r"^\| AdamW \| .*: 28 B a parameter x 1\.656 B parameters \| 1 \| 46\.37 \| 15\.46 \| "
                                      r"0\.44 \| 0\.03 \|$",
                                      r"^- not bounded here .*: 0\.07 ms a step: vectorized_elementwise_kernel<4, "
                                      r"FillFunctor<float>, .* 0\.05 ms \(n=1\); Memcpy HtoD 0\.02 ms \(n=1\)$",
                                      # largest first; AdamW (faster than its bound here) and rotary (at it) not listed
                                      r"^- over their bound, ms a step: swiglu bwd 0\.61, rmsnorm fwd 0\.01, "
                                      r"copy_rows 0\.01$",
                                      # The fusions' passes: 2 x 16384 x 2048 bf16 x 24 layers (the norms'
                                      # outputs), 3 x 16384 x 5632 x 24 (SwiGLU), 4 x 16384 x 48 x 128 x 24 (rotary).
                                      r"^\| the RMSNorm's scaling .* \| 3\.22 \| 1\.07 \| -?\d+\.\d \|$",
                                      r"^\| SwiGLU in w3's operand loads.* \| 13\.29 \| 4\.43 \| -?\d+\.\d \|$",
                                      r"^\| rotary and v .* \| 19\.33 \| 6\.44 \| -?\d+\.\d \|$",
                                      r"^- every kernel at its bound: -?\d+\.\d ms; goal <= 34\. cuBLAS"]),
                             Run(["{P}", "{S}", "--preset", "7b", "--summary", "{W}/summary.txt", "--copy-tbps", "3",
                                  "--step-s", "0.004"],
                                 out=[r"^\| swiglu bwd \| .* \| 1 \| 0\.45 \| 0\.15 \| 0\.92 \| 6\.12 \|$",
                                      r"^- everything else: 3\.5 ms a step \(the unprofiled step's wall time 4\.0 - "
                                      r"GEMM 0\.3 - attention 0\.2\)$"]),
                             # The 1b's budget for everything but GEMM and attention: 34 ms by default.
                             Run(["{P}", "{S}", "--preset", "1b", "--summary", "{W}/summary.txt", "--copy-tbps", "3",
                                  "--step-s", "0.004"],
                                 out=[r"^target 1b everything but GEMM and attention: 3\.5 ms a step \(wall 4\.0 - "
                                      r"GEMM 0\.3 - attention 0\.2; goal <= 34\): met$"]),
                             Run(["{P}", "{S}", "--preset", "1b", "--summary", "{W}/summary.txt", "--copy-tbps", "3",
                                  "--step-s", "0.004", "--rest-goal-ms", "3"],
                                 out=[r"^target 1b everything but GEMM and attention: 3\.5 ms .*goal <= 3\): not met$"]),
                             # NeMo's recipe: per micro-batch kernels 16 times a step, AdamW once over the
                             # 7b12's 3.274 B parameters; FP8's quantization (e4m3 of the 4 inputs a layer,
                             # 12 x 16 x 4096 x 23296 elements at 4 B: 73.28 GB with no weight launches).
                             Run(["{P}", "{S}", "--preset", "7b12", "--micro-num", "16", "--fp8", "--summary",
                                  "{W}/summary.txt", "--copy-tbps", "3"],
                                 out=[r"^Shape: .* = 4096 tokens a micro-batch, 16 micro-batches a step; the layers' "
                                      r"linears in FP8\.$",
                                      r"^\| cross_entropy \| .*, each micro-batch \| - \| 27\.04 \| 9\.01 \| not in the "
                                      r"summary \| - \|$",
                                      r"^\| AdamW \| .* x 3\.274 B parameters \| 1 \| 91\.67 \| 30\.56 \| 0\.44 \| 0\.01 \|$",
                                      r"^\| FP8 quantize e4m3 \| .* \| - \| 73\.28 \| 24\.43 \| not in the summary \| - \|$",
                                      r"^\| FP8 quantize e5m2 \| .* \| - \| 133\.68 \| 44\.56 \| not in the summary \| - \|$"])],
}
# Helpers another script runs: their recipe is that script's.
COVERED_BY = {"train_bench.py": "train_bench.sh"}


class Failure(Exception):
    pass


def parse(path, work):
    """bash -n and shellcheck (Debian's, scripts/setup.sh) for .sh, py_compile for .py."""
    if path.suffix == ".sh":
        for argv in (["bash", "-n", str(path)], ["shellcheck", str(path)]):
            if shutil.which(argv[0]) is None:
                raise Failure(f"{argv[0]} not found (bash scripts/setup.sh installs it)")
            r = subprocess.run(argv, cwd=path.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode != 0:
                print(r.stdout)
                raise Failure(f"{path}: {argv[0]} found errors (above)")
    elif path.suffix == ".py":
        try:
            py_compile.compile(str(path), cfile=str(work / "compiled.pyc"), doraise=True)
        except py_compile.PyCompileError as e:
            raise Failure(f"{path}: does not compile: {e.msg}") from None
    print(f"parsed: {path}")


def expand(s, ctx):
    for k, v in ctx.items():
        s = s.replace("{" + k + "}", v)
    return s


def check_lines(what, text, patterns):
    for rx in patterns:
        if not re.search(rx, text, re.M):
            raise Failure(f"{what}: no line matches {rx!r} (the summary line is missing or changed)")


def run_one(name, run, ctx, tree, work):
    if run.setup:
        run.setup(work, tree)
    log = work / "bench_log.md"
    log.unlink(missing_ok=True)
    env = dict(os.environ)
    # Debian's python3 first: the scripts' own python3 calls need its numpy and sentencepiece.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update({"LOOM_BENCH_LOG": str(log), "TMPDIR": str(work)})
    env.update({k: expand(v, ctx) for k, v in run.env.items()})
    argv = [expand(a, ctx) for a in run.argv]
    knobs = " ".join(f"{k}={expand(v, ctx)}" for k, v in run.env.items())
    print(f"run: {knobs} {' '.join(argv)}".strip(), flush=True)
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        print(e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace"))
        raise Failure(f"{name}: still running after {TIMEOUT_S} s") from None
    print(r.stdout)
    print(f"({time.monotonic() - t0:.1f} s, exit {r.returncode})", flush=True)
    if r.returncode != 0:
        raise Failure(f"{name}: exit {r.returncode} (its output is above)")
    check_lines(f"{name}'s output", r.stdout, run.out)
    if run.log:
        check_lines(f"{name}'s log ({log})", log.read_text(encoding="utf-8") if log.exists() else "", run.log)
    for f in run.files:
        if not os.path.exists(expand(f, ctx)):
            raise Failure(f"{name}: did not write {expand(f, ctx)}")


def smoke(script, build, tree, work):
    path = tree / "bench" / script
    if not path.is_file():
        raise Failure(f"no such benchmark script: {path}")
    parse(path, work)
    if script in RECIPES:
        ctx = {"S": str(path), "B": str(build), "W": str(work), "T": str(tree), "P": sys.executable}
        for run in RECIPES[script]:
            run_one(f"bench/{script}", run, ctx, tree, work)
    elif script in COVERED_BY:
        parent = COVERED_BY[script]
        if parent not in RECIPES or f"bench/{script}" not in (tree / "bench" / parent).read_text(encoding="utf-8"):
            raise Failure(f"bench/{script}: said to be run by bench/{parent}, which does not run it")
        print(f"bench/{script} runs inside bench/{parent}'s smoke test")
    elif script.startswith(("gpu/", "hf/")):
        print(f"bench/{script}: runs on the GPU machine only (torch 2, transformers), parsed")
    else:
        raise Failure(f"bench/{script}: no smoke recipe; add one to RECIPES in {pathlib.Path(__file__).name} "
                      "(tiny inputs, its summary line)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("build")
    ap.add_argument("script", help="path under bench/")
    ap.add_argument("--tree", help="repository root to take bench/SCRIPT from and run in (default: source)")
    ap.add_argument("--work", help="folder for the scratch folder (default: BUILD/test_tmp)")
    a = ap.parse_args()
    build = pathlib.Path(a.build).resolve()
    tree = pathlib.Path(a.tree or a.source).resolve()
    parent = pathlib.Path(a.work or build / "test_tmp")
    parent.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench_smoke.", dir=parent))
    try:
        smoke(a.script, build, tree, work)
    except Failure as e:
        sys.stdout.flush()
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"ok: bench/{a.script}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
