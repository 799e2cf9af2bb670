#!/usr/bin/python3
"""A test-side reader and writer of Megatron-Core's IndexedDataset (.bin/.idx), written from the
published layout with numpy alone, independent of tessel's C++:

  .idx: b"MMIDIDX\\x00\\x00", version <Q = 1, dtype code <B, sequence count <Q, document count <Q,
        sizes int32[S], pointers int64[S] (byte offsets into .bin), document index int64[D]
  .bin: the tokens of every sequence, back to back, in the dtype

  write PREFIX DTYPE SPEC.json   SPEC: a list of documents, each a list of sequences of token ids
  read PREFIX OUT.json           OUT: {"dtype": ..., "documents": [[[ids...], ...], ...]}
"""
import json
import struct
import sys

import numpy as np

HEADER = b"MMIDIDX\x00\x00"
CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
         7: np.float32, 8: np.uint16}


def write(prefix, dtype_name, documents):
    dtype = np.dtype(dtype_name)
    code = [c for c, t in CODES.items() if np.dtype(t) == dtype][0]
    sizes, document_index = [], [0]
    with open(prefix + ".bin", "wb") as f:
        for document in documents:
            for sequence in document:
                f.write(np.array(sequence, dtype=dtype).tobytes())
                sizes.append(len(sequence))
            document_index.append(len(sizes))
    pointers = np.concatenate([[0], np.cumsum(np.array(sizes, dtype=np.int64) * dtype.itemsize)[:-1]]) \
        if sizes else np.zeros(0, dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(HEADER)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(document_index)))
        f.write(np.array(sizes, dtype=np.int32).tobytes())
        f.write(np.array(pointers, dtype=np.int64).tobytes())
        f.write(np.array(document_index, dtype=np.int64).tobytes())


def read(prefix):
    with open(prefix + ".idx", "rb") as f:
        raw = f.read()
    assert raw[:9] == HEADER, "bad magic"
    version, = struct.unpack("<Q", raw[9:17])
    assert version == 1, "bad version"
    code, = struct.unpack("<B", raw[17:18])
    count, documents = struct.unpack("<QQ", raw[18:34])
    offset = 34
    sizes = np.frombuffer(raw, dtype=np.int32, count=count, offset=offset)
    offset += sizes.nbytes
    pointers = np.frombuffer(raw, dtype=np.int64, count=count, offset=offset)
    offset += pointers.nbytes
    document_index = np.frombuffer(raw, dtype=np.int64, count=documents, offset=offset)
    offset += document_index.nbytes
    assert offset == len(raw), "trailing bytes in the index"
    dtype = np.dtype(CODES[code])
    data = np.memmap(prefix + ".bin", dtype=np.uint8, mode="r") if count else np.zeros(0, np.uint8)
    sequences = [np.frombuffer(data, dtype=dtype, count=int(sizes[i]), offset=int(pointers[i])).tolist()
                 for i in range(count)]
    return {"dtype": dtype.name,
            "documents": [sequences[document_index[d]:document_index[d + 1]]
                          for d in range(len(document_index) - 1)]}


if __name__ == "__main__":
    if sys.argv[1] == "write":
        with open(sys.argv[4]) as f:
            write(sys.argv[2], sys.argv[3], json.load(f))
    elif sys.argv[1] == "read":
        with open(sys.argv[3], "w") as f:
            json.dump(read(sys.argv[2]), f)
    else:
        sys.exit("usage: megatron_format.py write PREFIX DTYPE SPEC.json | read PREFIX OUT.json")
