"""The docs against the tools: every key and default that docs/TRAIN.md's and docs/MONITOR.md's key
tables give must be what `loom-train --help` prints, every loom-train key --help lists must be in
TRAIN.md's table, and every `section.key` any page of docs/ names must be a key loom-train knows
(HF.md once named `model.norm_eps`, which loom-train rejects). The options tables of
docs/TOKENIZE.md are checked against `loom-tokenize --help` the same way.

usage: docs_keys_test.py SOURCE_DIR LOOM_TRAIN_BIN LOOM_TOKENIZE_BIN
"""
import glob
import os
import re
import subprocess
import sys

SRC, LOOM_TRAIN, LOOM_TOKENIZE = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def fail(msg):
    failures.append(msg)


def help_options(binary, *args):
    """{'--name': default or None (no default printed) or 'switch' (takes no value)} from --help."""
    r = subprocess.run([binary, *args, "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # loom-train's --help ends with Megatron-LM's translated flags: not options of its own.
    options = r.stdout.split("\nMegatron-LM flags translated on the command line")[0]
    out = {}
    for m in re.finditer(r"^  (?:-\w \[ )?(--[A-Za-z0-9_.-]+)(?: \])?( arg)?(?: \(=([^)]*)\))?", options, re.M):
        name, arg, default = m.group(1), m.group(2), m.group(3)
        out[name] = default if arg else "switch"
    return out


def table_rows(path, heading):
    """The rows (list of cells) of the first table under `heading` in a markdown file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    start = lines.index(heading)
    rows, seen = [], False
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            seen = True
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if set(cells[0]) <= set("-: "):
                continue
            rows.append(cells)
        elif seen:
            break
    return rows[1:]  # without the header row


def split_list(cell):
    """'0, 50, false' -> ['0', '50', 'false']; keeps quotes."""
    return [p.strip() for p in cell.split(",")]


def same_default(doc, printed):
    doc = re.sub(r"\s*\(.*\)$", "", doc).strip().strip("`")  # '"" (off)' -> '""', '`5`' -> '5'
    if printed is None:
        return doc in ('""', "")
    if printed == "switch":
        return doc in ("off", "false")
    if doc in ("true", "on") and printed in ("1", "true"):
        return True
    if doc in ("false", "off") and printed in ("0", "false"):
        return True
    if doc == printed:
        return True
    try:
        num = eval(doc, {}) if re.fullmatch(r"[0-9.e+-]+/[0-9.]+", doc) else float(doc)
        return abs(num - float(printed)) <= 1e-12 * max(1.0, abs(num))
    except ValueError:
        return False


# ---- loom-train: TRAIN.md's Keys table and MONITOR.md's table against --help
train = help_options(LOOM_TRAIN)
# Defaults the docs state as what they resolve to, which --help cannot print.
derived = {"--job.run_dir": "runs/run_YYYYMMDD_HHMMSS", "--ckpt.save_ckpt_folder": "run_dir/checkpoints",
           "--data.train_folder": "required"}
documented = set()
for page, heading in (("docs/TRAIN.md", "## Keys"), ("docs/MONITOR.md", "# Monitoring and fault tolerance")):
    for cells in table_rows(os.path.join(SRC, page), heading):
        keys = re.findall(r"`([^`]+)`", cells[0])
        defaults = split_list(cells[1]) if len(keys) > 1 else [cells[1]]
        if len(defaults) == 1:
            defaults *= len(keys)  # one default for every key of the row
        if len(defaults) != len(keys):
            fail(f"{page}: row {cells[0]}: {len(keys)} keys but {len(defaults)} defaults")
            continue
        for key, doc in zip(keys, defaults):
            name = key if key.startswith("--") else "--" + key
            documented.add(name) if page == "docs/TRAIN.md" else None
            if name not in train:
                fail(f"{page}: {key} is not an option of loom-train --help")
            elif name in derived:
                if doc != derived[name]:
                    fail(f"{page}: {key}: default {doc!r}, expected {derived[name]!r}")
            elif not same_default(doc, train[name]):
                fail(f"{page}: {key}: documented default {doc!r}, loom-train --help prints {train[name]!r}")
            elif doc.strip("`") in ("true", "false") and train[name] != doc.strip("`"):
                # config.ini and the start-up dump write true/false: --help says it the same way
                fail(f"{page}: {key}: loom-train --help prints {train[name]!r} for {doc.strip('`')!r}")
for name in sorted(set(train) - documented - {"--help", "--config"}):
    fail(f"docs/TRAIN.md's Keys table lacks {name} (loom-train --help lists it)")

# Every `section.key` the docs name, in any page, is a key of loom-train.
sections = {n[2:].split(".")[0] for n in train if "." in n}
for page in sorted(glob.glob(os.path.join(SRC, "docs/*.md"))) + [os.path.join(SRC, "README.md")]:
    text = open(page, encoding="utf-8").read()
    for m in re.finditer(r"`-{0,2}([a-z_]+)\.([a-z0-9_-]+)(?:[=`\s])", text):
        section, key = m.group(1), m.group(2).replace("-", "_")
        if section not in sections or key in ("safetensors", "json", "ini", "model", "bin", "meta"):  # file names
            continue
        if f"--{section}.{key}" not in train:
            line = text.count("\n", 0, m.start()) + 1
            fail(f"{os.path.relpath(page, SRC)}:{line}: {section}.{key} is not a loom-train key")

# ---- loom-tokenize: TOKENIZE.md's Options table against --help
tok = help_options(LOOM_TOKENIZE)
tok_derived = {"--threads": "all cores", "--model": "required", "--output-dir": "required",
               "--eos": "on for `loom`, off for `internlm`", "--bos": "on"}
for cells in table_rows(os.path.join(SRC, "docs/TOKENIZE.md"), "## Options"):
    names = re.findall(r"(--[a-z-]+)", cells[0])
    raw = cells[1]
    doc = raw.strip("`")
    for name in names:
        if name not in tok:
            fail(f"docs/TOKENIZE.md: {name} is not an option of loom-tokenize --help")
        elif name in tok_derived or name.startswith("--no-"):
            if name in tok_derived and raw != tok_derived[name]:
                fail(f"docs/TOKENIZE.md: {name}: default {raw!r}, expected {tok_derived[name]!r}")
        elif not (doc == "" and tok[name] is None) and not same_default(doc, tok[name]):
            fail(f"docs/TOKENIZE.md: {name}: documented default {doc!r}, loom-tokenize --help prints {tok[name]!r}")

# ---- Every command line the docs show (README.md, docs/*.md: indented lines that start with a loom
# tool, with their continuation lines) names only options its (sub)command's --help lists, and a
# synopsis' `[--opt N]` shows the default --help prints.
SUBCOMMANDS = {"loom-train": ("plan", "export-hf", "generate"), "loom-tokenize": ("train-spm",),
               "loom-pack": ("verify", "stats", "head", "merge", "split", "convert", "pack")}
BINARIES = {"loom-train": LOOM_TRAIN, "loom-tokenize": LOOM_TOKENIZE,
            "loom-pack": os.path.join(os.path.dirname(os.path.dirname(LOOM_TOKENIZE)), "packer", "loom-pack")}
helps = {}


def options_of(tool, sub):
    if (tool, sub) not in helps:
        args = [sub] if sub else []
        r = subprocess.run([BINARIES[tool], *args, "--help"], capture_output=True, text=True)
        opts = help_options(BINARIES[tool], *args)
        aliases = re.findall(r"(--[A-Za-z_-]+) = --", r.stdout)  # loom-tokenize's "Aliases:" line
        if (tool, sub) == ("loom-train", "plan"):  # its own flags are in its usage text, then the run's keys
            aliases += re.findall(r"--[a-z][a-z-]*", r.stdout.split("The run's keys")[0])
        helps[(tool, sub)] = (opts, set(aliases))
    return helps[(tool, sub)]


commands = 0
for page in sorted(glob.glob(os.path.join(SRC, "docs/*.md"))) + [os.path.join(SRC, "README.md")]:
    lines = open(page, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^ {4,}(loom-train|loom-tokenize|loom-pack)\b(.*)$", lines[i])
        if not m:
            i += 1
            continue
        first, text = i + 1, m.group(2)
        while text.rstrip().endswith("\\") or (i + 1 < len(lines) and re.match(r"^ {8,}\[", lines[i + 1])):
            i += 1
            text = text.rstrip().rstrip("\\") + " " + lines[i].strip()
        i += 1
        tool = m.group(1)
        words = text.split()
        sub = words[0] if words and words[0] in SUBCOMMANDS[tool] else ""
        if tool == "loom-pack" and not sub:
            continue  # `loom-pack SUBCOMMAND [options]`
        opts, aliases = options_of(tool, sub)
        commands += 1
        where = f"{os.path.relpath(page, SRC)}:{first}"
        text = re.sub(r"\s#.*$", "", text)  # a trailing comment
        for o in re.finditer(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9_-]*)(?![.\w])", text):
            name = o.group(1)
            if name not in opts and name.replace("_", "-") not in opts and name not in aliases:
                fail(f"{where}: {tool} {sub}: {name} is not in its --help")
        for o in re.finditer(r"\[(--[a-z-]+) ([0-9.]+)\]", text):
            name, doc = o.group(1), o.group(2)
            if name in opts and opts[name] not in (None, "switch") and not same_default(doc, opts[name]):
                fail(f"{where}: {tool} {sub}: [{name} {doc}] but --help's default is {opts[name]!r}")
if commands < 20:
    fail(f"only {commands} command lines found in the docs: the parser above missed them")

# ---- A subcommand's synopsis (the Usage line of its --help) names every option --help lists, unless
# it says [options] (export-hf's once left out --max-positions). Positional inputs are named by their
# metavariable (INPUT..., PATH), not as --input/--inputs.
for tool, subs in SUBCOMMANDS.items():
    for sub in subs:
        out = subprocess.run([BINARIES[tool], sub, "--help"], capture_output=True, text=True).stdout
        if "The run's keys" in out:  # plan: its own flags in its own text (checked above), then a run's keys
            continue
        usage = out.split("\n\n")[0]
        if not usage.startswith("Usage: "):
            fail(f"{tool} {sub} --help does not start with 'Usage: '")
            continue
        if "[options]" in usage:
            continue
        named = set(re.findall(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9_-]*)|(?<![\w-])(-[a-z])\b", usage))
        named = {a or b for a, b in named}
        for name in sorted(set(options_of(tool, sub)[0]) - {"--help", "--config", "--input", "--inputs"}):
            short = re.search(r"^  (-\w) \[ " + re.escape(name) + r" \]", out, re.M)
            if name not in named and not (short and short.group(1) in named):
                fail(f"{tool} {sub} --help: its Usage line lacks {name}")

if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print(f"OK: {len(documented)} loom-train keys and loom-tokenize's options agree with the docs")
