#!/usr/bin/python3
"""One 1024³ sgemm through torch, in this process's OpenBLAS setting: prints the kernels OpenBLAS
runs (openblas_get_corename) and the median GFLOP/s of 7 products after 2 untimed ones. OpenBLAS
picks its kernels when it loads, so bench/openblas_coretype.sh runs this once per candidate
OPENBLAS_CORETYPE, each in a fresh process."""
import ctypes
import os
import statistics
import sys
import time

import torch


def openblas_corename():
    """The core type of the OpenBLAS torch loaded (it is already in this process: same handle)."""
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if os.path.basename(path).startswith("libopenblas"):
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
    return "unknown"


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.set_num_threads(threads)
    n = 1024
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    for _ in range(2):
        a @ b
    seconds = []
    for _ in range(7):
        start = time.perf_counter()
        a @ b
        seconds.append(time.perf_counter() - start)
    print(openblas_corename(), f"{2 * n**3 / statistics.median(seconds) / 1e9:.1f}")


if __name__ == "__main__":
    main()
