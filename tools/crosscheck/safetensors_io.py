"""The safetensors format, read and written with numpy alone (no safetensors module): an 8-byte
little-endian header length, a JSON header {name: {"dtype", "shape", "data_offsets": [begin,
end]}, "__metadata__": {...}}, then the data (offsets relative to the end of the header)."""
import json
import math
import struct

import numpy as np


SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
                      "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    """Returns {name: float32 numpy array} for every tensor in the file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise ValueError(f"{path}: header length {header_len} runs past the end of the file")
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {entry['dtype']}")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        count = math.prod(shape)
        if end - begin != count * np.dtype(dtype).itemsize or end > len(data):
            raise ValueError(f"{path}: tensor {name} data_offsets {begin}..{end} do not fit "
                             f"shape {list(shape)} of {entry['dtype']}")
        array = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
        if entry["dtype"] == "BF16":  # bf16 is the upper half of an fp32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = array.astype(np.float32)
    return tensors


def write_safetensors(path, tensors):
    """Writes {name: numpy array} (float32 or float64) as a safetensors file, names sorted."""
    header, offset, chunks = {}, 0, []
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64"}[array.dtype]
        raw = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        chunks.append(raw)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)  # the format allows space padding; align to 8
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for raw in chunks:
            f.write(raw)
