#!/usr/bin/python3
"""Golden ids for tests/common/spm_encoder_test.cpp from Python sentencepiece (Debian's python3-sentencepiece).

usage: spm_golden.py MODEL INPUT OUTPUT
INPUT holds texts separated by '\n' (a final '\n' ends the last text; '\r' stays part of a text). The
bytes go to sentencepiece as they are, invalid UTF-8 included.
OUTPUT gets one line per text: the ids of SentencePieceProcessor.EncodeAsIds, space-separated.
"""
import sys

import sentencepiece as spm


def main():
    model, src, dst = sys.argv[1:4]
    sp = spm.SentencePieceProcessor(model_file=model)
    data = open(src, 'rb').read()
    texts = data.split(b'\n')
    if data.endswith(b'\n'):
        texts.pop()
    with open(dst, 'w') as out:
        for t in texts:
            out.write(' '.join(map(str, sp.EncodeAsIds(t))) + '\n')


if __name__ == '__main__':
    main()
