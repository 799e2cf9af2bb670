#!/usr/bin/env python3
"""Damages a tessel save or a Hugging Face folder on purpose, for the fault tests.

  edit_save.py value FILE.safetensors TENSOR INDEX VALUE [METADATA_JSON]
      sets element INDEX of the F32 tensor TENSOR to VALUE (nan, -1, ...); with METADATA_JSON,
      the file's CRC-32 there is recomputed, so that only what the values mean is wrong
  edit_save.py key METADATA_JSON PATH JSON|--delete
      sets (or deletes) a key of metadata.json, PATH as dotted keys (tensors.NAME.shape)
"""
import json
import struct
import sys
import zlib


def set_value(path, tensor, index, value, metadata):
    with open(path, "r+b") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        begin = header[tensor]["data_offsets"][0]
        assert header[tensor]["dtype"] == "F32"
        f.seek(8 + header_len + begin + 4 * index)
        f.write(struct.pack("<f", float(value)))
    if metadata:
        with open(path, "rb") as f:
            crc = zlib.crc32(f.read())
        with open(metadata) as f:
            meta = json.load(f)
        name = path.rsplit("/", 1)[-1]
        for entry in meta["files"]:
            if entry["name"] == name:
                entry["crc32"] = crc
        with open(metadata, "w") as f:
            json.dump(meta, f)


def set_key(path, dotted, value):
    with open(path) as f:
        meta = json.load(f)
    # tensor names hold dots: a key is matched whole when it exists
    keys, node = dotted.split("."), meta
    while len(keys) > 1:
        for n in range(len(keys), 0, -1):
            if ".".join(keys[:n]) in node and n < len(keys):
                node, keys = node[".".join(keys[:n])], keys[n:]
                break
        else:
            raise KeyError(dotted)
    if value == "--delete":
        del node[keys[0]]
    else:
        node[keys[0]] = json.loads(value)
    with open(path, "w") as f:
        json.dump(meta, f)


if __name__ == "__main__":
    if sys.argv[1] == "value":
        set_value(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5],
                  sys.argv[6] if len(sys.argv) > 6 else None)
    elif sys.argv[1] == "key":
        set_key(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
