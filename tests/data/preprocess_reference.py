#!/usr/bin/python3
"""What Megatron-LM's tools/preprocess_data.py writes for a corpus under a byte-level tokenizer
(token = byte of the UTF-8 text, vocabulary 256, so dtype uint16, no end-of-document token),
written independently of tessel with megatron_format.py:

  preprocess_reference.py INPUT OUTPUT_PREFIX KEY [KEY ...]

JSONL (.jsonl/.json): json.loads per line (whitespace-only lines skipped), each key a string or a
list of strings (one sequence per non-empty string); one output PREFIX_{key}_document per key.
Plain text: documents cut after each run of blank lines; one output named after the first key.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_format  # noqa: E402


def encode(text):
    return list(text.encode("utf-8"))


def text_documents(data):
    documents, current, seen_text, blank_run = [], b"", False, False
    for line in data.splitlines(keepends=True):
        blank = line.strip(b" \t\r\n") == b""
        if not blank and blank_run:
            documents.append(current)
            current, seen_text, blank_run = b"", False, False
        current += line
        blank_run = blank_run or (blank and seen_text)
        seen_text = seen_text or not blank
    if current:
        documents.append(current)
    return documents


def main(path, prefix, keys):
    with open(path, "rb") as f:
        data = f.read()
    data.decode("utf-8")  # must be UTF-8
    if path.endswith(".jsonl") or path.endswith(".json"):
        outputs = {k: [] for k in keys}
        for line in data.decode("utf-8").split("\n"):
            if not line.strip(" \t\r\n"):
                continue
            record = json.loads(line)
            for k in keys:
                sentences = record[k] if isinstance(record[k], list) else [record[k]]
                outputs[k].append([encode(s) for s in sentences if encode(s)])
    else:
        assert b"\r" not in data, "the reference splits LF text only"
        outputs = {keys[0]: [[list(d)] for d in text_documents(data)]}
    for k, documents in outputs.items():
        megatron_format.write(f"{prefix}_{k}_document", "uint16", documents)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
