#!/usr/bin/env python3
"""Real Chinese text for the encoder benchmarks: Tang poems, one poem a line.

Reads the poems of chinese-poetry/chinese-poetry (MIT, Copyright (c) 2016 JackeyGao;
https://github.com/chinese-poetry/chinese-poetry, commit 99ebbef7e1345c0985c44b9fd96a3f9e776f117b),
files 全唐诗/poet.tang.N.json in order of N, and writes each poem's paragraphs joined (the text as
printed, traditional characters) as one line, poems in file order, until MAX_BYTES of text.

    python3 bench/tang_corpus.py CHECKOUT OUT.txt [MAX_BYTES] [SKIP_POEMS]
"""
import json
import pathlib
import re
import sys


def main():
    root = pathlib.Path(sys.argv[1]) / "全唐诗"
    out = pathlib.Path(sys.argv[2])
    max_bytes = int(sys.argv[3]) if len(sys.argv) > 3 else 4 << 20
    skip = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    files = sorted(root.glob("poet.tang.*.json"), key=lambda p: int(re.search(r"\.(\d+)\.json$", p.name).group(1)))
    written, poems = 0, 0
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for path in files:
            for poem in json.loads(path.read_text(encoding="utf-8")):
                line = "".join(p.strip() for p in poem.get("paragraphs", [])).replace("\n", "")
                if not line:
                    continue
                poems += 1
                if poems <= skip:
                    continue
                n = len(line.encode("utf-8")) + 1
                if written + n > max_bytes:
                    print(f"{out}: {poems - skip - 1} poems, {written} bytes")
                    return
                f.write(line + "\n")
                written += n
    print(f"{out}: {poems - skip} poems, {written} bytes")


if __name__ == "__main__":
    main()
