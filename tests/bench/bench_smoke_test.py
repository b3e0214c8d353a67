#!/usr/bin/python3
"""The benchmarks' smoke test must fail when a script is broken. Each case copies the repository as
a tree of links (bench_smoke.py --tree) with one script replaced by a broken copy, runs the smoke
test on it and checks that it fails, and why; the unbroken copy first, which must pass.

  bench_smoke_test.py SOURCE_DIR BUILD_DIR
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def shadow(source, dst, replaced):
    """dst mirrors source (less .git) through symbolic links, but for the files of `replaced` (path ->
    text), written in folders of their own; a path that source lacks is added."""
    def mirror(src_dir, dst_dir, rel):
        dst_dir.mkdir()
        for entry in sorted(os.listdir(src_dir)):
            path = rel + entry
            if path in replaced:
                (dst_dir / entry).write_text(replaced[path], encoding="utf-8")
            elif any(p.startswith(path + "/") for p in replaced):
                mirror(src_dir / entry, dst_dir / entry, path + "/")
            elif path != ".git":
                (dst_dir / entry).symlink_to(src_dir / entry)
        for p, text in replaced.items():
            if p.startswith(rel) and "/" not in p[len(rel):] and not (dst_dir / p[len(rel):]).exists():
                (dst_dir / p[len(rel):]).write_text(text, encoding="utf-8")
    mirror(source, dst, "")


def edit(text, old, new, script):
    if old not in text:
        raise SystemExit(f"bench_smoke_test: {script} no longer contains {old!r}; update this test")
    return text.replace(old, new)


def cases(source):
    """(name, script, broken text, regex that the smoke test's output must match, expected exit)."""
    read = lambda s: (source / "bench" / s).read_text(encoding="utf-8")
    rss, train = read("tokenize_rss.sh"), read("train_bench.sh")
    return [
        ("unbroken copy passes", "tokenize_rss.sh", rss, r"^ok: bench/tokenize_rss\.sh$", 0),
        # The fault this test exists for: the parameter count read without its thousands separators.
        ("log format drift", "train_bench.sh", edit(train, r"\([0-9,]*\) parameters", r"\([0-9]*\) parameters",
                                                    "train_bench.sh"),
         r"^no 'model: N parameters' line in loom-train's log:(.*\n)*FAILED: bench/train_bench\.sh: exit 1", 1),
        ("summary line lost", "tokenize_rss.sh", edit(rss, 'echo "peak RSS at', 'echo "peak memory at', "tokenize_rss.sh"),
         r"^FAILED: bench/tokenize_rss\.sh's output: no line matches", 1),
        ("syntax error", "dist_bench.sh", read("dist_bench.sh") + "\nif true; then\n", r"bash found errors", 1),
        ("shellcheck finding", "tokenize_rss.sh", edit(rss, 'rm -rf "$WORK/out"', "rm -rf $WORK/out", "tokenize_rss.sh"),
         r"SC2086.*\n(.*\n)*FAILED: .*tokenize_rss\.sh: shellcheck found errors", 1),
        ("GPU script that does not compile", "gpu/trace_summary.py", read("gpu/trace_summary.py") + "\ndef (:\n",
         r"^FAILED: .*trace_summary\.py: does not compile", 1),
        ("new script without a recipe", "new_bench.sh", "#!/usr/bin/env bash\necho hello\n",
         r"^FAILED: bench/new_bench\.sh: no smoke recipe", 1),
    ]


def main():
    source, build = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
    (build / "test_tmp").mkdir(parents=True, exist_ok=True)
    failed = []
    for name, script, text, want, want_rc in cases(source):
        work = pathlib.Path(tempfile.mkdtemp(prefix="bench_harness.", dir=build / "test_tmp"))
        try:
            shadow(source, work / "tree", {"bench/" + script: text})
            r = subprocess.run([sys.executable, str(HERE / "bench_smoke.py"), str(source), str(build), script,
                                "--tree", str(work / "tree"), "--work", str(work)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        ok = r.returncode == want_rc and re.search(want, r.stdout, re.M)
        print(f"{'ok' if ok else 'NOT OK'}: {name} (bench/{script}): exit {r.returncode}, wanted {want_rc} and {want!r}")
        if not ok:
            print(r.stdout)
            failed.append(name)
    if failed:
        print(f"FAILED: the smoke test did not catch: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
