#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs into fuzz/corpus/<target>/ (committed; small files only).

Usage, from the repository root after building loom-tokenize and loom-pack (any build):
    /usr/bin/python3 fuzz/make_corpus.py BUILD_DIR

Seeds come from data_samples/ (heads of the real inputs, spm_2k.model, shards tokenized from them)
plus handmade cases per reader. Layouts: fuzz/document_fuzz.h (an option byte, then the file) for
the document readers, fuzz_util.h's split2 (u32 length of the .meta with bit 31 asking for the
checksums to be recomputed, the .meta, the .bin) for the shard formats, the file itself for the
rest. Deterministic: a rerun writes the same bytes.
"""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")
SAMPLES = os.path.join(ROOT, "data_samples")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def split2(meta, bin_, fix_checksums=False):
    return struct.pack("<I", len(meta) | (0x80000000 if fix_checksums else 0)) + meta + bin_


def main():
    build = sys.argv[1]
    tok = os.path.join(build, "tokenize", "loom-tokenize")
    pack = os.path.join(build, "packer", "loom-pack")
    shutil.rmtree(OUT, ignore_errors=True)
    head = open(os.path.join(SAMPLES, "botchan_head.txt"), "rb").read()
    records = json.load(open(os.path.join(SAMPLES, "botchan_tail.json"), encoding="utf-8"))
    neko = gzip.open(os.path.join(SAMPLES, "neko_head.jsonl.gz")).read().split(b"\n")

    # txt: every document mode (option bits 0-1) with whole and small reads (bits 4-7).
    txt = head[:1500]
    for opt in (0x00, 0x01, 0x02, 0x31, 0x50):
        put("fuzz_txt_reader", "botchan_%02x.txt" % opt, bytes([opt]) + txt)
    put("fuzz_txt_reader", "blank_crlf_cr.txt", b"\x01a\r\n\r\n  b\rc\n\n\n\xe2\x80\x83d \n")
    put("fuzz_txt_reader", "bad_utf8.txt", b"\x00ok\n\xff\xfe bad\n\xe3\x81\n")

    # jsonl: the Japanese records, text key and raw records, a nested key, bad records.
    jl = b"\n".join(neko[:3]) + b"\n"
    for opt in (0x00, 0x04, 0x20):
        put("fuzz_jsonl_reader", "neko_%02x.jsonl" % opt, bytes([opt]) + jl)
    put("fuzz_jsonl_reader", "nested.jsonl", b'\x08{"meta": {"body": "x\\u00e9\\ud83d\\ude00"}, "text": 1}\n\n{"meta": 2}\r\n')
    put("fuzz_jsonl_reader", "bad.jsonl", b'\x00{"text": "a"\n[1, 2]\n{"text": null}\n{"text": "\xff"}\n{"text": "b", "text": "c"}')

    # json array: two botchan records, raw records (json.dumps) and the text key; broken arrays.
    arr = json.dumps(records[:2], ensure_ascii=False).encode()
    for opt in (0x00, 0x04, 0x0c, 0x30):
        put("fuzz_json_array_reader", "botchan_%02x.json" % opt, bytes([opt]) + arr)
    put("fuzz_json_array_reader", "odd.json", b'\x04 [ {"text": "a\\"]"}, {"x": [1.5e300, -0.0, 1e-7, 12345678901234567890]}, "s", 3 ]\n')
    put("fuzz_json_array_reader", "broken.json", b'\x00[{"text": "a"}, {"text": "b"')

    # json.dumps: values of every kind.
    put("fuzz_python_json", "record.json", json.dumps(records[0], ensure_ascii=False))
    put("fuzz_python_json", "numbers.json", b"[0, -0, -0.0, 1.0, 1e16, 1e-5, 0.1, 123456789012345678, 18446744073709551615, -9223372036854775808, 2.5e-308, 1.7976931348623157e308]")
    put("fuzz_python_json", "strings.json", b'{"a": "\\u0000\\u001f\\"\\\\/\\b\\f\\n\\r\\t", "\xe5\x90\xbe": "\xf0\x9f\x98\x80", "a": [true, false, null, {}, []]}')

    # gzip and zstd streams (option byte 0: .gz, 1: .zst), whole and cut short.
    small = head[:600]
    gz = gzip.compress(small, mtime=0)
    put("fuzz_byte_source", "botchan.gz", b"\x00" + gz)
    put("fuzz_byte_source", "botchan_cut.gz", b"\x00" + gz[: len(gz) // 2])
    put("fuzz_byte_source", "two_members.gz", b"\x00" + gzip.compress(b"a\n", mtime=0) + gzip.compress(b"b\n", mtime=0))
    zst = subprocess.run(["zstd", "-q", "-c", "-19"], input=small, stdout=subprocess.PIPE, check=True).stdout
    put("fuzz_byte_source", "botchan.zst", b"\x01" + zst)
    put("fuzz_byte_source", "botchan_cut.zst", b"\x01" + zst[: len(zst) // 2])

    # Shards: tokenize a few small inputs with spm_2k.model, pack them, convert to InternLM.
    model = os.path.join(SAMPLES, "spm_2k.model")
    with tempfile.TemporaryDirectory() as t:
        inp = os.path.join(t, "in")
        os.makedirs(inp)
        open(os.path.join(inp, "a.txt"), "wb").write(b"\n".join(head.split(b"\n")[1:9]))
        open(os.path.join(inp, "b.jsonl"), "wb").write(b"\n".join(neko[:2]) + b"\n")
        open(os.path.join(inp, "c.txt"), "wb").write(b"x\n")
        run = lambda *a: subprocess.run(a, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run(tok, "--model", model, "--output-dir", os.path.join(t, "tok"),
            os.path.join(inp, "a.txt"), os.path.join(inp, "b.jsonl"), os.path.join(inp, "c.txt"))
        shards = sorted(f for f in os.listdir(os.path.join(t, "tok")) if f.endswith(".bin"))
        for f in shards:
            p = os.path.join(t, "tok", f)
            for fix in (False, True):
                put("fuzz_shard_meta", f[:-4] + ("_fixsums" if fix else ""),
                    split2(open(p + ".meta", "rb").read(), open(p, "rb").read(), fix))
        for strategy, seq in (("concat", 64), ("bestfit", 48)):
            out = os.path.join(t, "pack_" + strategy)
            run(pack, "pack", "--seq-len", str(seq), "--strategy", strategy, "--seed", "1", "--output-dir", out,
                *[os.path.join(t, "tok", f) for f in shards])
            for f in sorted(os.listdir(out)):
                if f.endswith(".bin"):
                    p = os.path.join(out, f)
                    for fix in (False, True):
                        put("fuzz_packed_meta", strategy + "_" + f[:-4] + ("_fixsums" if fix else ""),
                            split2(open(p + ".meta", "rb").read(), open(p, "rb").read(), fix))
        out = os.path.join(t, "internlm")
        run(pack, "convert", "--to", "internlm", "--output-dir", out, *[os.path.join(t, "tok", f) for f in shards])
        for f in sorted(os.listdir(out)):
            if f.endswith(".bin"):
                p = os.path.join(out, f)
                put("fuzz_internlm_meta", f[:-4], split2(open(p + ".meta", "rb").read(), open(p, "rb").read()))
        out = os.path.join(t, "megatron")
        run(pack, "convert", "--to", "megatron", "--output-dir", out, *[os.path.join(t, "tok", f) for f in shards])
        for f in sorted(os.listdir(out)):
            if f.endswith(".bin"):
                p = os.path.join(out, f)
                put("fuzz_megatron_index", f[:-4], split2(open(p[:-4] + ".idx", "rb").read(), open(p, "rb").read()))

    # Megatron: a document of two sequences (--split-sentences), one of none, one of one.
    idx = (b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 3, 4) + struct.pack("<3i", 3, 2, 4) +
           struct.pack("<3q", 0, 6, 10) + struct.pack("<4q", 0, 2, 2, 3))
    put("fuzz_megatron_index", "sentences", split2(idx, struct.pack("<9H", *range(1, 10))))

    forged_headers()
    dedup_work_files()
    dedup_eval_items()

    # SentencePiece: the sample model (26 KB; the test models in tests/data are 250 KB and more).
    put("fuzz_spm_model", "spm_2k.model", open(model, "rb").read())

    # INI: sections, comments, a repeated key, typed values, every spelling Boost takes.
    put("fuzz_ini", "config.ini", "# a comment\n[job]\nname = my run\nthreads = 4\nseed=12\n\n[adam]\nlr = 3e-4\nbeta = 0.95\n"
        "[data]\ntotal_steps = 1000\nverify_checksums = false\nfolders = a\nfolders = b\n")
    put("fuzz_ini", "flat.ini", "job.name = x\ndata.verify_checksums = on\n[adam]\nlr=1\n")
    # A hang this target found: Boost's message for a bad value that holds "%value%" never ended.
    put("fuzz_ini", "placeholder.ini", "[data]\ntotal_steps = -0499\nverify_checksums = %value%') for op\n")
    put("fuzz_ini", "placeholder_case.ini", "[data]\nverify_checksums = %vaLue%') for op\n")
    # A typed double read as NaN, which resolved_ini wrote as "null" (now refused).
    put("fuzz_ini", "nan.ini", "job.name =cksun\n[adam]\nlr=Nan\n")

    # safetensors: a file as safetensors::write lays it out (header padded to 8 bytes), and odd ones.
    def st(tensors, meta=None, pad=True):
        header, data = {}, b""
        if meta is not None:
            header["__metadata__"] = meta
        for name, dtype, shape, payload in tensors:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
            data += payload
        h = json.dumps(header).encode()
        if pad:
            h += b" " * (-len(h) % 8)
        return struct.pack("<Q", len(h)) + h + data
    put("fuzz_safetensors", "two.safetensors", st([("w", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                                                   ("step", "F64", [], struct.pack("<d", 5))], {"format": "pt"}))
    put("fuzz_safetensors", "dtypes.safetensors", st([(d, d, [1], b"\x01" * n) for d, n in
                                                      (("BF16", 2), ("F16", 2), ("I64", 8), ("I32", 4), ("I16", 2),
                                                       ("I8", 1), ("U8", 1), ("BOOL", 1))], pad=False))
    put("fuzz_safetensors", "empty.safetensors", st([("e", "F32", [0, 3], b"")], {}))
    # A shape whose byte size wraps to 0 in 64 bits (a crash of this target, now refused by the reader).
    put("fuzz_safetensors", "wrapping_shape.safetensors", st([("w", "U8", [2**32, 2**32], b"")]))

    # Checkpoint manifest: the fixed files fuzz_checkpoint_manifest.cpp writes, listed truly.
    def xxh(b):
        import xxhash
        return xxhash.xxh64(b).hexdigest()
    files = {"model.safetensors": b"model", "optimizer.safetensors": b"optimizer", "state.json": b"{}", "config.ini": b""}
    man = {"format": "loom-checkpoint", "version": 1, "step": 3,
           "files": [{"name": n, "bytes": len(b), "xxh64": xxh(b)} for n, b in files.items()]}
    put("fuzz_checkpoint_manifest", "manifest.json", json.dumps(man))
    man["step"] = 4
    put("fuzz_checkpoint_manifest", "wrong_step.json", json.dumps(man))

    # state.json as TrainState::to_json writes it.
    put("fuzz_train_state", "state.json",
        '{\n  "version": 1,\n  "step": 6,\n  "updates": 5,\n  "consumed_samples": 24,\n  "consumed_tokens": 300,\n'
        '  "inf_nan_skips": 1,\n  "skipped_batches": 0,\n  "spike_skips": 0,\n  "spike": {"mean": 2.5, "n": 3},\n'
        '  "sampler": {"seed": 1024, "epoch": 0, "consumed_samples": 24},\n  "world_size": 2,\n'
        '  "rng": {"cpu": "00ff10"},\n  "loom_version": "0.1.0"\n}\n')
    # A counter past 2^63-1 (failed the round-trip check; now refused, not read as negative).
    put("fuzz_train_state", "huge_step.json",
        '{"version": 1, "step": 18446744073709551615, "updates": 0, "consumed_tokens": 0, "inf_nan_skips": 0,'
        ' "skipped_batches": 0, "sampler": {"seed": 1, "epoch": 0, "consumed_samples": 0}, "world_size": 1,'
        ' "rng": {"cpu": "00"}}')
    put("fuzz_train_state", "old.json",
        '{"version": 1, "step": 0, "updates": 0, "consumed_samples": 0, "consumed_tokens": 0, "inf_nan_skips": 0,'
        ' "skipped_batches": 0, "sampler": {"seed": 1, "epoch": 2, "consumed_samples": 0}, "world_size": 1, "rng": {"cpu": ""}}')

    # Texts for the differential encoder target (loom's encoder against libsentencepiece).
    put("fuzz_spm_diff", "english.txt", "Hello  world, it's 3.14 o'clock.\tTabs\nand newlines  ")
    put("fuzz_spm_diff", "japanese.txt", "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。")
    put("fuzz_spm_diff", "nfkc_emoji.txt", "ＡＢＣ１２３ ½ café naïve 😀👍🏽 e\u0301 \u200b\u3000x")
    put("fuzz_spm_diff", "digits.txt", "1234567890 00 3.14159 1,000,000 ٣٤٥")
    put("fuzz_spm_diff", "bad_utf8.txt", b"ab\xff\xfe c\xc3 d\xe3\x81 \xed\xa0\x80 end")
    put("fuzz_spm_diff", "controls.txt", "\x00\x01\x7f\u0085\ue000\U0010fffd\u2581\u2581 \u2581x")


def loom_header(magic, fields):
    """A 128-byte loom header: magic, version 1, header_size 128, then the packed fields, zero-padded."""
    h = magic + struct.pack("<II", 1, 128) + fields
    return h + b"\0" * (128 - len(h))


def forged_headers():
    """Headers whose counts wrap past 2^64 or whose fields are out of range, checksums recomputed
    (bit 31 of split2's length): each was read as valid, or crashed a reader, before the readers
    checked it (tests/packer/corruption_test.cpp has one test per case)."""
    def shard(num_docs, num_tokens, offsets, bos=1, eos=2, flags=0, encoder=0, reserved=b""):
        fields = struct.pack("<IIiiII", 2, 1000, bos, eos, flags, 0) + struct.pack("<QQQQQII", num_docs, num_tokens,
                                                                                  0, 0, 0, encoder, 0)
        return loom_header(b"LOOMTOK\0", fields + struct.pack("<Q", 0) + reserved) + struct.pack(
            "<%dQ" % len(offsets), *offsets)
    wrap = 1 << 63  # x 2 bytes = 2^64: an empty .bin "fits"
    put("fuzz_shard_meta", "forged_num_tokens_wrap", split2(shard(3, wrap, [0, 3, 7, wrap]), b"", True))
    put("fuzz_shard_meta", "forged_num_docs_wrap", split2(shard((1 << 61) - 1, 8, [0, 8]), b"\1\0" * 8, True))
    ids = struct.pack("<8H", 1, 5, 2, 1, 999, 7, 2, 3)
    put("fuzz_shard_meta", "forged_bos_beyond_vocab", split2(shard(3, 8, [0, 3, 7, 8], bos=1000), ids, True))
    put("fuzz_shard_meta", "forged_flags_encoder", split2(shard(3, 8, [0, 3, 7, 8], flags=4, encoder=9), ids, True))
    put("fuzz_shard_meta", "forged_reserved", split2(shard(3, 8, [0, 3, 7, 8], reserved=b"\1"), ids, True))

    def packed(num_packs, seq_len, segments, bos=1, eos=2, flags=3, seg_offsets=None):
        fields = struct.pack("<IIiiIIII", 2, 50, bos, eos, flags, seq_len, 2, 0)
        fields += struct.pack("<QQQQQQQQ", num_packs, len(segments), sum(s[2] for s in segments), 1, 0, 0, 7, 0)
        offsets = seg_offsets if seg_offsets is not None else list(range(num_packs + 1))
        return (loom_header(b"LOOMPACK", fields) + struct.pack("<%dQ" % len(offsets), *offsets) +
                b"".join(struct.pack("<QIIII", *s) for s in segments))
    two = [(0, 0, 4, 0, 0), (0, 0, 2, 4, 1)]
    pbin = struct.pack("<8H", 10, 11, 12, 13, 14, 15, 2, 2)
    put("fuzz_packed_meta", "forged_bos_beyond_vocab", split2(packed(2, 4, two, bos=50), pbin, True))
    put("fuzz_packed_meta", "forged_eos_negative", split2(packed(2, 4, two, eos=-7), pbin, True))
    put("fuzz_packed_meta", "forged_flag_bits", split2(packed(2, 4, two, flags=0x83), pbin, True))
    put("fuzz_packed_meta", "forged_seg_flags", split2(packed(2, 4, [two[0], (0, 0, 2, 4, 5)]), pbin, True))
    put("fuzz_packed_meta", "forged_num_packs_wrap",
        split2(packed((1 << 61) - 1, 4, two, seg_offsets=[0, 1, 2]), pbin, True))

    # InternLM: shape (2^61, 2), 2^61 rows x 8 bytes = 2^64, so a .meta of the header alone "fits".
    text = b"{'descr': '<i4', 'fortran_order': False, 'shape': (2305843009213693952, 2), }"
    text += b" " * (117 - len(text)) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text
    put("fuzz_internlm_meta", "forged_rows_wrap", split2(npy, b'{"tokens": [1, 2, 3]}\n'))

    # Megatron: S and D whose entries' bytes wrap past 2^64.
    def idx(s, d):
        return b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, s, d) + struct.pack("<i q 2q", 2, 0, 0, 1)
    put("fuzz_megatron_index", "forged_sequences_wrap", split2(idx(1 << 62, 2), struct.pack("<2H", 1, 2)))
    put("fuzz_megatron_index", "forged_documents_wrap", split2(idx(1, 1 << 61), struct.pack("<2H", 1, 2)))



def dedup_eval_items():
    """loom-dedup's evaluation files (dedup/src/eval_set.cpp): the first byte picks the extension
    (0 .txt, 1 .jsonl, 2 .json, 3 another), the second the key (bit 0: "question", else "text"),
    the rest is the file. Valid files of each format, then the errors eval_set_test.cpp names."""
    target = "fuzz_dedup_eval_items"
    ev = lambda ext, data, key=0: bytes([ext, key]) + data
    put(target, "txt", ev(0, "What is 2 + 2?\n\n\u56db\u304b\u3002\nlast line without newline".encode()))
    put(target, "jsonl", ev(1, b'{"text": "a question"}\n\n{"text": "q\\u00e9", "id": 3}\n'))
    put(target, "jsonl_question", ev(1, b'{"question": "x", "text": 5}\n', 1))
    put(target, "json", ev(2, b'[{"text": "one"}, {"text": "two", "more": [1, 2]}]'))
    put(target, "forged_json_not_array", ev(2, b'{"text": "one"}'))
    put(target, "forged_json_element", ev(2, b'[{"text": "one"}, 7, {"t": "x"}]'))
    put(target, "forged_jsonl_bad_line", ev(1, b'{"text": "ok"}\n{"text": \n'))
    put(target, "forged_jsonl_key_not_string", ev(1, b'{"text": ["a"]}\n'))
    put(target, "forged_extension", ev(3, b"a,b\n"))
    put(target, "forged_nul_and_invalid_utf8", ev(0, b"\x00\xff\xfe\n\xc3"))

def dedup_work_files():
    """loom-dedup's work files (dedup/include/loom/dedup/work_file.h): an option byte (bit 0: the
    target recomputes the records checksum), then the file. Valid small files of every kind, then
    forged headers: counts whose bytes wrap past 2^64, record sizes and kinds that disagree, cut or
    padded files, a bad magic, version or checksum, reserved bytes set (tests/dedup/work_file_test.cpp
    has one test per case)."""
    import xxhash
    target = "fuzz_dedup_work_file"

    def work(kind, record_bytes, aux, records, n=None, magic=b"LOOMDDP\0", version=1, reserved=b"", checksum=None):
        body = b"".join(r if isinstance(r, bytes) else struct.pack("<%dQ" % len(r), *r) for r in records)
        count = len(records) if n is None else n
        cs = xxhash.xxh64(body).intdigest() if checksum is None else checksum
        head = magic + struct.pack("<IIIIQQQ", version, kind, record_bytes, aux, count, 0x1234, cs)
        return head + reserved + b"\0" * (16 - len(reserved)) + body

    def put_work(name, data, fix=False):
        put(target, name, bytes([1 if fix else 0]) + data)

    sig2 = [(5, 11, 12, 7, 9), (0, 13, 14, 2**64 - 1, 2**64 - 1), (8, 11, 12, 7, 9)]
    put_work("signatures_h2", work(1, 40, 2, sig2))
    sig112 = [tuple([9, 1, 2] + [(i * 2654435761) % (1 << 61) for i in range(112)]),
              tuple([9, 3, 4] + [(i * 40503) % (1 << 61) for i in range(112)])]
    put_work("signatures_h112", work(1, 920, 112, sig112))
    doc = lambda s, i: s << 40 | i
    put_work("band_keys", work(2, 16, 3, [(7, doc(0, 0)), (7, doc(1, 2)), (9, doc(0, 1)), (2**63, doc(1, 0))]))
    put_work("band_exact", work(2, 16, 14, [(11, doc(0, 0)), (11, doc(0, 2))]))
    put_work("edges", work(3, 16, 3, [(doc(0, 0), doc(1, 2)), (doc(0, 1), doc(0, 5))]))
    put_work("edges_empty", work(3, 16, 0, []))
    put_work("contamination", work(4, 24, 0, [(doc(1, 0), 0, 17), (doc(1, 3), 2, 0)]))
    removal = lambda d, m, reason, est, jac: struct.pack("<6Q2d", d, m, reason, 0, 0, 0, est, jac)
    put_work("removals", work(5, 64, 0, [removal(doc(1, 2), doc(0, 0), 2, 0.875, float("nan")),
                                         removal(doc(1, 4), 2**64 - 1, 3, 0.0, 0.0)]))

    edges = [(1, 2), (3, 4)]
    wrap = (1 << 60) + 2  # x 16 bytes = 2^64 + 32: two records "fit"
    put_work("forged_num_records_wrap", work(3, 16, 0, edges, n=wrap), True)
    put_work("forged_num_records_max", work(3, 16, 0, edges, n=2**64 - 1), True)
    put_work("forged_num_records_past_end", work(3, 16, 0, edges, n=3), True)
    put_work("forged_record_bytes_24", work(3, 24, 0, [(1, 2, 3)]), True)
    put_work("forged_record_bytes_0", work(3, 0, 0, edges), True)
    put_work("forged_signatures_aux_huge", work(1, 32, 2**32 - 1, [(1, 2, 3, 4)]), True)
    put_work("forged_signatures_aux_mismatch", work(1, 40, 3, [(1, 2, 3, 4, 5)]), True)
    full = work(3, 16, 0, edges)
    put_work("forged_truncated", full[:-8])
    put_work("forged_trailing", full + b"\0" * 16)
    put_work("forged_header_only_cut", full[:40])
    put_work("forged_magic", work(3, 16, 0, edges, magic=b"LOOMDDQ\0"))
    put_work("forged_version", work(3, 16, 0, edges, version=2))
    put_work("forged_kind", work(9, 16, 0, edges))
    put_work("forged_checksum", work(3, 16, 0, edges, checksum=1))
    put_work("forged_reserved", work(3, 16, 0, edges, reserved=b"\1"))


if __name__ == "__main__":
    main()
