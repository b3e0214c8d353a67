"""A new user's first minutes with the three tools, through the binaries: --version, loom-train's
answers to Megatron-LM flags it does not translate (a .bin/.idx prefix as --data-path, --split,
--valid-data-path, --tokenizer-model), its --help's Megatron translations, no run folder left by a
start that fails, and plot_metrics.py's usage line.

usage: first_minutes_test.py SOURCE_DIR BUILD_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC, BUILD = sys.argv[1], sys.argv[2]
TOKENIZE = os.path.join(BUILD, "tokenize/loom-tokenize")
PACK = os.path.join(BUILD, "packer/loom-pack")
TRAIN = os.path.join(BUILD, "trainer/loom-train")
MODEL = os.path.join(SRC, "data_samples/spm_2k.model")
failures = 0


def run(args, cwd=None):
    r = subprocess.run(args, capture_output=True, text=True, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def check(ok, what, detail=""):
    global failures
    if not ok:
        failures += 1
        print(f"FAIL {what}\n{detail}")


def expected_version():
    """project(loom VERSION x.y.z) of the top CMakeLists.txt, and CMAKE_BUILD_TYPE of the build."""
    top = open(os.path.join(SRC, "CMakeLists.txt")).read()
    version = re.search(r"project\(loom VERSION ([0-9.]+)", top).group(1)
    cache = open(os.path.join(BUILD, "CMakeCache.txt")).read()
    build_type = re.search(r"^CMAKE_BUILD_TYPE:STRING=(.*)$", cache, re.M).group(1)
    return version, build_type


def check_versions():
    version, build_type = expected_version()
    for tool, binary in (("loom-tokenize", TOKENIZE), ("loom-pack", PACK), ("loom-train", TRAIN)):
        rc, out, err = run([binary, "--version"])
        lines = out.splitlines()
        what = f"{tool} --version"
        check(rc == 0 and err == "", what + " exits 0, quietly", out + err)
        check(lines[:1] == [f"{tool} {version}"], what + f": first line '{tool} {version}'", out)
        check(f"build type: {build_type}" in lines, what + f": build type {build_type}", out)
        commit = [l[len("commit: "):] for l in lines if l.startswith("commit: ")]
        check(len(commit) == 1, what + ": one commit line", out)
        if commit and commit[0] != "unknown":
            # A commit of this repository (the build may be older than HEAD: others commit beside it).
            h = commit[0].split("-")[0]
            rc_git, _, _ = run(["git", "-C", SRC, "cat-file", "-e", h + "^{commit}"])
            check(re.fullmatch(r"[0-9a-f]{12}(-dirty)?", commit[0]) and rc_git == 0, what + ": a commit of the tree",
                  out)
    _, out, _ = run([TRAIN, "--version"])
    check(re.search(r"^LibTorch: [12]\.[0-9]+\.[0-9]+$", out, re.M), "loom-train --version names LibTorch", out)
    check(re.search(r"^CUDA: ", out, re.M), "loom-train --version says whether it is a CUDA build", out)


def check_megatron_hints(tmp):
    # A real Megatron-LM dataset, as preprocess_data.py (and loom-tokenize) names it.
    prefix = os.path.join(tmp, "corpus_text_document")
    lines = [l.strip() for l in open(os.path.join(SRC, "data_samples/botchan_head.txt"), encoding="utf-8") if l.strip()]
    with open(os.path.join(tmp, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for i in range(0, len(lines), 10):
            f.write(json.dumps({"text": " ".join(lines[i:i + 10])}) + "\n")
    rc, out, err = run([TOKENIZE, "--input", os.path.join(tmp, "corpus.jsonl"),
                        "--output-prefix", os.path.join(tmp, "corpus"), "--tokenizer-type", "Llama2Tokenizer",
                        "--tokenizer-model", MODEL, "--append-eod", "--workers", "1"])
    check(rc == 0 and os.path.exists(prefix + ".idx"), "loom-tokenize writes a Megatron dataset", out + err)
    rc, out, err = run([TRAIN, "--config", os.path.join(SRC, "configs/demo.ini"), "--data-path", prefix], cwd=tmp)
    check(rc == 2 and "Megatron-LM's indexed dataset" in err, "--data-path PREFIX is named a Megatron dataset", err)
    cmd = [l.strip() for l in err.splitlines() if l.strip().startswith("loom-pack pack ")]
    check(len(cmd) == 1 and cmd[0].endswith(" " + prefix), "one loom-pack command, of the prefix", err)
    check(any(l.strip() == "loom-train ... --data-path packed/train" for l in err.splitlines()),
          "the --data-path that reads the packs", err)
    if len(cmd) == 1:  # the command runs as printed, given the two values it asks for
        words = cmd[0].replace("SEQ_LEN", "64").replace("TOKENIZER.model", MODEL).split()
        rc, out, err = run([PACK if w == "loom-pack" else w for w in words], cwd=tmp)
        check(rc == 0, "the printed loom-pack command packs the dataset", out + err)
        rc, out, err = run([PACK, "verify", os.path.join(tmp, "packed/train")])
        check(rc == 0 and "1 passed" in out, "its packs verify", out + err)
        # verify counts documents and packs apart; stats prints its report and no configuration.
        rc, out, err = run([PACK, "verify", os.path.join(tmp, "packed/train"), prefix])
        docs = sum(1 for _ in open(os.path.join(tmp, "corpus.jsonl")))
        check(rc == 0 and re.search(rf"verify: {docs:,} documents, [0-9,]+ packs? and [0-9,]+ tokens in the shards", err),
              f"verify's log counts the {docs} documents and the packs apart", err)
        rc, out, err = run([PACK, "stats", prefix])
        check(rc == 0 and "configuration" not in err, "stats prints no configuration", err)
    # A blend: a command per prefix, each into its own sub-folder, and the blend of those.
    other = os.path.join(tmp, "other_text_document")
    for ext in (".bin", ".idx"):
        shutil.copyfile(prefix + ext, other + ext)
    rc, out, err = run([TRAIN, "--data-path", "3", prefix, "1", other + ".bin"], cwd=tmp)
    check(rc == 2 and err.count("loom-pack pack ") == 2 and err.count(" " + other + "\n") == 1 and
          '--data-path "3 packed/train/corpus_text_document 1 packed/train/other_text_document"' in err,
          "a blend of prefixes gets a command each and the blend of the packs", err)
    for args, want in ((["--split", "949,50,1"], "loom-pack split --valid-fraction 0.05 "),
                       (["--split=90/8/2"], "loom-pack split --valid-fraction 0.08 "),
                       (["--valid-data-path", prefix], "--data.valid_folder=DIR"),
                       (["--tokenizer_model=" + MODEL], "--data.tokenizer=M.model")):
        rc, out, err = run([TRAIN, "--config", os.path.join(SRC, "configs/demo.ini")] + args, cwd=tmp)
        check(rc == 2 and want in err, f"{args[0]}: a hint naming {want}", err)
    rc, out, err = run([TRAIN, "--help"])
    translations = out.split("Megatron-LM flags translated on the command line")[-1]
    check(rc == 0 and translations != out, "--help has a section of Megatron-LM's translated flags", out[-3000:])
    for flag in ("--data-path", "--load", "--lr-decay-style", "--override-opt_param-scheduler",
                 "--use-checkpoint-opt_param-scheduler", "--split", "--valid-data-path", "--tokenizer-model"):
        check(flag in translations, f"--help lists {flag}", translations)


def check_failed_start(tmp):
    work = os.path.join(tmp, "fail")
    os.makedirs(work)
    # The run folder is made (runs/run_TIME with config.ini and loom.lock), then the data is missing.
    rc, out, err = run([TRAIN, "--config", os.path.join(SRC, "configs/demo.ini"), "--job.run_dir=",
                        "--data.train_folder=missing", "--data.valid_folder="], cwd=work)
    check(rc == 1 and "missing" in err, "a start without its data fails with exit 1", err)
    check(os.listdir(work) == [], "a failed start leaves no run folder", str(os.listdir(work)))
    # A run folder that existed before stays, with what was in it.
    os.makedirs(os.path.join(work, "mine"))
    open(os.path.join(work, "mine/notes.txt"), "w").write("kept\n")
    rc, out, err = run([TRAIN, "--config", os.path.join(SRC, "configs/demo.ini"), "--job.run_dir=mine",
                        "--data.train_folder=missing", "--data.valid_folder="], cwd=work)
    kept = os.path.join(work, "mine/notes.txt")
    check(rc == 1 and os.path.exists(kept) and open(kept).read() == "kept\n",
          "a failed start keeps a run folder it did not make", str(os.listdir(os.path.join(work, "mine"))))


def check_plot_metrics():
    script = os.path.join(SRC, "scripts/plot_metrics.py")
    rc, out, err = run([sys.executable, script])
    check(rc == 2 and err.startswith("usage: plot_metrics.py ") and "Traceback" not in err,
          "plot_metrics.py without arguments: a usage line, exit 2", err)
    rc, out, err = run([sys.executable, script, "--help"])
    check(rc == 0 and out.startswith("usage: plot_metrics.py "), "plot_metrics.py --help: the usage, exit 0", out)
    rc, out, err = run([sys.executable, script, "/nonexistent/metrics.jsonl", "out.png"])
    check(rc == 1 and "/nonexistent/metrics.jsonl: No such file" in err and "Traceback" not in err,
          "plot_metrics.py on a missing file names it, exit 1", err)


with tempfile.TemporaryDirectory() as tmp:
    check_versions()
    check_megatron_hints(tmp)
    check_failed_start(tmp)
    check_plot_metrics()
print("FAILED" if failures else "ok", failures)
sys.exit(1 if failures else 0)
