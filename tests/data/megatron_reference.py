#!/usr/bin/python3
"""An independent reference for tessel's GPT datasets: Megatron-Core's BlendedMegatronDatasetBuilder,
GPTDataset and BlendedDataset index building, written here in Python with numpy from Megatron-Core's
Python code (gpt_dataset.py, blended_dataset.py, blended_megatron_dataset_builder.py, utils.py,
blended_megatron_dataset_config.py and helpers.cpp's build_sample_idx / build_blending_indices),
with numpy.random.RandomState doing the shuffles. It reads the data with megatron_format.py.

  shuffle SEED N [SEED N]   print [RandomState(SEED).shuffle(arange(N)), ...] as JSON
  integers SEED LOW HIGH N DTYPE [LOW HIGH N DTYPE ...]
                            print [g.integers(LOW, HIGH, size=N, dtype=DTYPE), ...] as JSON, the
                            calls in turn on one g = numpy.random.default_rng(SEED)
  check CONFIG.json         build every split as Megatron would and compare with what
                            `tessel data index` wrote: the cached .npy indices (found by the MD5 of
                            Megatron's description, so the cache names are checked too) and the
                            dumped samples (--dump-samples); exits non-zero naming the first mismatch

CONFIG: {"data_path": [...] | "train_data_path"/"valid_data_path"/"test_data_path": [...],
         "split": "949,50,1", "seq_length": S, "seed": N, "num_samples": [train, valid, test],
         "cache": DIR or null (Megatron's default beside the data), "dump": DIR,
         "tokenizer": "ByteTokenizer"}
        or {"mock": {"vocab_size": N, "eod": E}, "seq_length": ..., "seed": ..., "num_samples": ...,
         "cache": DIR, "dump": DIR, "dump_limit": K, "tokenizer": "NullTokenizer"} for
         MockGPTDataset (pretrain_gpt.py --mock-data); "dump_limit" compares each split's first K
         samples only (all: 0 or absent)
"""
import functools
import hashlib
import json
import math
import os
import re
import sys
from collections import OrderedDict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_format  # noqa: E402

SPLITS = ["train", "valid", "test"]
SURPLUS = 0.005  # BlendedMegatronDatasetConfig.mid_level_dataset_surplus


def normalize(weights):
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def parse_and_normalize_split(split):
    split = list(map(float, re.findall(r"[.0-9]+", split)))
    split = split + [0.0 for _ in range(3 - len(split))]
    assert len(split) == 3 and all(s >= 0.0 for s in split)
    return normalize(split)


def split_matrix(vector):
    expansion = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector])
    bookends = list(zip(expansion[:-1], expansion[1:]))
    return [None if end <= begin else (begin, end) for begin, end in bookends]


def get_blend_from_list(blend):
    if len(blend) % 2 == 1:
        return [p.strip() for p in blend], None
    try:
        weights = [float(blend[i]) for i in range(0, len(blend), 2)]
    except ValueError:
        return [p.strip() for p in blend], None
    return [blend[i + 1].strip() for i in range(0, len(blend), 2)], weights


class LowLevel:
    def __init__(self, prefix):
        data = megatron_format.read(prefix)
        self.path_prefix = prefix
        self.sequences = [np.array(s, dtype=np.int64) for doc in data["documents"] for s in doc]
        self.sequence_lengths = np.array([len(s) for s in self.sequences], dtype=np.int32)

    def get(self, idx, offset=0, length=None):
        s = self.sequences[idx]
        if length is None:
            length = len(s) - offset
        return s[offset:offset + length]


class MockLowLevel:
    """MockGPTLowLevelDataset: its seed, size and length bound are class attributes there."""

    def __init__(self, vocab_size, eod):
        self.path_prefix = None
        self.vocab_size, self.eod = vocab_size, eod
        rng = np.random.default_rng(seed=0)
        self.sequence_lengths = rng.integers(low=1, high=4096, size=100000, dtype=np.int32)

    def get(self, idx, offset=0, length=None):
        n = self.sequence_lengths[idx]
        sample = np.int64(np.concatenate([(np.arange(n - 1) + 1) % self.vocab_size, [self.eod]]))
        if length is None:
            length = n - offset
        return sample[offset:offset + length]


def build_sample_idx(sizes, document_index, seq_length, num_epochs, tokens_per_epoch):
    """helpers.cpp build_sample_idx, drop_last_partial_sequence=True, add_extra_token=1."""
    num_samples = (num_epochs * tokens_per_epoch - 1) // seq_length
    sample_idx = np.zeros((num_samples + 1, 2), dtype=np.int64)
    document_idx_index, doc_offset = 0, 0
    for k in range(1, num_samples + 1):
        remaining = seq_length + 1
        while remaining != 0:
            document_length = int(sizes[document_index[document_idx_index]]) - doc_offset
            remaining -= document_length
            if remaining <= 0:
                doc_offset += remaining + document_length - 1
                remaining = 0
            else:
                assert document_idx_index != len(document_index) - 1
                document_idx_index += 1
                doc_offset = 0
        sample_idx[k] = (document_idx_index, doc_offset)
    sample_idx_max = max(document_index.shape[0], sizes.max())
    return sample_idx.astype(np.int32 if sample_idx_max <= np.iinfo(np.int32).max else np.int64)


def build_document_index(documents, num_epochs, rng, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = np.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1).astype(np.int32)
        rng.shuffle(document_index)
        return document_index
    first = build_document_index(documents, num_epochs - 1, rng, False)
    last = build_document_index(documents, 1, rng, False)
    return np.concatenate((first, last))


def build_shuffle_index(num_samples, total_size, rng):
    dtype = np.uint32 if total_size < np.iinfo(np.uint32).max - 1 else np.int64
    first = np.arange(0, num_samples, 1, dtype=dtype)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, 1, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate((first, last))


class GPTDataset:
    def __init__(self, low, dataset_path, indices, num_samples, split, config):
        self.dataset, self.indices, self.num_samples, self.split = low, indices, num_samples, split
        self.seq = config["seq_length"]
        self.cls = "MockGPTDataset" if isinstance(low, MockLowLevel) else "GPTDataset"
        ui = OrderedDict()
        ui["class"] = self.cls
        ui["dataset_path"] = dataset_path
        ui["num_samples"] = num_samples
        ui["index_split"] = split
        ui["random_seed"] = config["seed"]
        ui["sequence_length"] = self.seq
        ui["split"] = config["split_string"]
        ui["split_matrix"] = config["split_matrix"]
        ui["tokenizer"] = config["tokenizer"]
        self.unique_identifiers = ui
        self.unique_description = json.dumps(ui, indent=4)
        self.hash = hashlib.md5(self.unique_description.encode("utf-8")).hexdigest()
        # Mock data is cached only under --data-cache-path.
        self.cache = config["cache"] or (low.path_prefix and
                                         os.path.join(low.path_prefix, "cache", "GPTDataset_indices"))
        self.build(config["seed"])

    def build(self, seed):
        tokens_per_epoch = int(np.sum(self.dataset.sequence_lengths[self.indices]))
        num_epochs, num_tokens = 1, tokens_per_epoch
        if self.num_samples is not None:
            while num_tokens < self.num_samples * self.seq + 1:
                num_epochs += 1
                num_tokens += tokens_per_epoch
        separate_final_epoch = False
        if num_epochs > 1:
            sans_final = ((num_epochs - 1) * tokens_per_epoch - 1) // self.seq
            from_final = self.num_samples - sans_final
            per_epoch = (tokens_per_epoch - 1) // self.seq
            assert 0 <= from_final <= per_epoch + 1
            separate_final_epoch = from_final < int(0.80 * per_epoch)
        self.num_epochs, self.separate_final_epoch = num_epochs, separate_final_epoch
        rng = np.random.RandomState(seed)
        self.document_index = build_document_index(self.indices, num_epochs, rng, separate_final_epoch)
        self.sample_index = build_sample_idx(self.dataset.sequence_lengths, self.document_index,
                                             self.seq, num_epochs, tokens_per_epoch)
        total = self.sample_index.shape[0] - 1
        self.shuffle_index = build_shuffle_index(sans_final if separate_final_epoch else total,
                                                 total, rng)

    def __len__(self):
        return self.sample_index.shape[0] - 1

    def __getitem__(self, idx):
        idx = self.shuffle_index[idx]
        beg, beg_offset = self.sample_index[idx]
        end, end_offset = self.sample_index[idx + 1]
        parts = []
        if beg == end:
            parts.append(self.dataset.get(self.document_index[beg], offset=beg_offset,
                                          length=end_offset - beg_offset + 1))
        else:
            for i in range(beg, end + 1):
                offset = 0 if i > beg else beg_offset
                length = None if i < end else end_offset + 1
                parts.append(self.dataset.get(self.document_index[i], offset=offset, length=length))
        starts, position = [], 0
        for k, part in enumerate(parts):
            if k > 0 and len(part) > 0:
                starts.append(position)
            position += len(part)
        return np.concatenate(parts), starts

    def check_cache(self):
        if self.cache is None:
            return
        base = os.path.join(self.cache, f"{self.hash}-{self.cls}-{self.split}-")
        for name, expected in (("document_index", self.document_index),
                               ("sample_index", self.sample_index),
                               ("shuffle_index", self.shuffle_index)):
            path = base + name + ".npy"
            if not os.path.isfile(path):
                fail(f"{path} missing: tessel's cache name differs from Megatron's for\n"
                     f"{self.unique_description}")
            got = np.load(path)
            if got.dtype != expected.dtype or not np.array_equal(got, expected):
                fail(f"{path}: {got.dtype}{got.shape} differs from the reference "
                     f"{expected.dtype}{expected.shape} (epochs {self.num_epochs}, separate final "
                     f"epoch {self.separate_final_epoch})")
        with open(base + "description.txt") as f:
            if f.read() != self.unique_description:
                fail(base + "description.txt differs from Megatron's description")


class BlendedDataset:
    def __init__(self, datasets, weights, size, config):
        assert all(w > 0 for w in weights)
        weights = normalize(weights)
        self.datasets, self.weights, self.size, self.cache = datasets, weights, size, config["cache"]
        self.split = datasets[0].split
        ui = OrderedDict()
        ui["class"] = "BlendedDataset"
        ui["datasets"] = [d.unique_identifiers for d in datasets]
        ui["split"] = self.split
        ui["weights"] = weights
        ui["size"] = size
        self.unique_description = json.dumps(ui, indent=4)
        self.hash = hashlib.md5(self.unique_description.encode("utf-8")).hexdigest()
        # helpers.cpp build_blending_indices
        self.dataset_index = np.zeros(size, dtype=np.int16)
        self.dataset_sample_index = np.zeros(size, dtype=np.int64)
        current = [0] * len(datasets)
        for k in range(size):
            drawn = max(float(k), 1.0)
            errors = [weights[d] * drawn - current[d] for d in range(len(datasets))]
            d = int(np.argmax(errors))  # the first of the largest, as the strict > in helpers.cpp
            self.dataset_index[k] = d
            self.dataset_sample_index[k] = current[d]
            current[d] += 1

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        return self.datasets[self.dataset_index[idx]][self.dataset_sample_index[idx]]

    def check_cache(self):
        for d in self.datasets:
            d.check_cache()
        if self.cache is None:
            return
        base = os.path.join(self.cache, f"{self.hash}-BlendedDataset-{self.split}-")
        for name, expected in (("dataset_index", self.dataset_index),
                               ("dataset_sample_index", self.dataset_sample_index)):
            path = base + name + ".npy"
            if not os.path.isfile(path):
                fail(f"{path} missing: tessel's blend cache name differs from Megatron's")
            got = np.load(path)
            if got.dtype != expected.dtype or not np.array_equal(got, expected):
                fail(f"{path} differs from the reference")
        counts = np.bincount(self.dataset_index, minlength=len(self.weights)) / max(self.size, 1)
        if self.size >= 10000 and np.max(np.abs(counts - self.weights)) > 0.01:
            fail(f"blend {counts} is not within 1 % of the weights {self.weights}")


def build(config):
    """BlendedMegatronDatasetBuilder._build_blended_dataset_splits with sizes given."""
    sizes = config["num_samples"]
    lows = {}

    def low(prefix):
        if prefix not in lows:
            lows[prefix] = LowLevel(prefix)
        return lows[prefix]

    def megatron_splits(prefix, split, split_sizes, cfg, ds=None):
        ds = ds or low(prefix)
        n = ds.sequence_lengths.shape[0]
        out = []
        for i in range(3):
            if split[i] is None:
                out.append(None)
                continue
            beg, end = int(round(split[i][0] * float(n))), int(round(split[i][1] * float(n)))
            out.append(GPTDataset(ds, prefix, np.arange(beg, end, 1, dtype=np.int32),
                                  split_sizes[i], SPLITS[i], cfg))
        return out

    def blend_splits(prefixes, weights, split, split_sizes, cfg, per_split=False):
        if weights is not None:
            weights = normalize(weights)
        # blend_per_split: one prefix is a plain dataset whatever its weight; blend: if unweighted
        if len(prefixes) == 1 and (weights is None or per_split):
            return megatron_splits(prefixes[0], split, split_sizes, cfg)
        if weights is None:
            buffer = [[None] * 3 for _ in prefixes]
        else:
            target = [[int(math.ceil(s * w)) if s is not None else None for s in split_sizes]
                      for w in weights]
            buffer = [[int(math.ceil(math.ceil(s * w) * (1 + SURPLUS))) if s is not None else None
                       for s in split_sizes] for w in weights]
        mids = [megatron_splits(p, split, buffer[d], cfg) for d, p in enumerate(prefixes)]
        out = [None] * 3
        for i in range(3):
            if split[i] is None:
                continue
            datasets = [m[i] for m in mids]
            if weights is not None:
                w, size = weights, sum(target[d][i] for d in range(len(prefixes)))
            else:
                w = [len(d) for d in datasets]
                size = min(split_sizes[i], sum(w))
            out[i] = BlendedDataset(datasets, w, size, cfg)
        return out

    cfg = {"seq_length": config["seq_length"], "seed": config["seed"], "cache": config.get("cache"),
           "tokenizer": config.get("tokenizer", "ByteTokenizer")}
    if config.get("mock"):
        # No blend: Megatron's config sets mock and the split "1,1,1".
        split = split_matrix(parse_and_normalize_split("1,1,1"))
        cfg.update(split_string="1,1,1", split_matrix=split)
        mock = MockLowLevel(config["mock"]["vocab_size"], config["mock"]["eod"])
        return megatron_splits(None, split, sizes, cfg, mock)
    if config.get("data_path"):
        prefixes, weights = get_blend_from_list(config["data_path"])
        split = split_matrix(parse_and_normalize_split(config["split"]))
        cfg.update(split_string=config["split"], split_matrix=split)
        return blend_splits(prefixes, weights, split, sizes, cfg)
    cfg.update(split_string=None, split_matrix=None)
    out = [None] * 3
    for i, key in enumerate(("train_data_path", "valid_data_path", "test_data_path")):
        if not config.get(key):
            continue
        spoof, spoof_sizes = [None] * 3, [0] * 3
        spoof[i], spoof_sizes[i] = (0.0, 1.0), sizes[i]
        prefixes, weights = get_blend_from_list(config[key])
        out[i] = blend_splits(prefixes, weights, spoof, spoof_sizes, cfg, per_split=True)[i]
    return out


def fail(message):
    print("megatron_reference: " + message, file=sys.stderr)
    sys.exit(1)


def check(config):
    datasets = build(config)
    for i, ds in enumerate(datasets):
        split = SPLITS[i]
        dump = os.path.join(config["dump"], f"{split}_samples.npy")
        if ds is None:
            if os.path.exists(dump):
                fail(f"tessel built a {split} split, Megatron builds none")
            continue
        ds.check_cache()
        if not os.path.exists(dump):
            fail(f"{dump} missing: tessel built no {split} split")
        got = np.load(dump)
        starts = np.load(os.path.join(config["dump"], f"{split}_document_starts.npy"))
        count = min(config.get("dump_limit") or len(ds), len(ds))
        if got.shape != (count, config["seq_length"] + 1):
            fail(f"{split}: tessel dumped {got.shape[0]} samples, Megatron has {len(ds)} "
                 f"({count} expected)")
        expected_starts = []
        for k in range(count):
            tokens, doc_starts = ds[k]
            if not np.array_equal(got[k], tokens):
                fail(f"{split} sample {k}: tessel {got[k].tolist()} != Megatron {tokens.tolist()}")
            expected_starts += [[k, p] for p in doc_starts]
        expected_starts = np.array(expected_starts, dtype=np.int32).reshape(-1, 2)
        if not np.array_equal(starts, expected_starts):
            fail(f"{split}: document starts differ")
        print(f"{split}: {count} samples of {len(ds)} equal")


if __name__ == "__main__":
    if sys.argv[1] == "shuffle":
        shuffled = []
        for seed, n in zip(sys.argv[2::2], sys.argv[3::2]):
            values = np.arange(int(n), dtype=np.int64)
            np.random.RandomState(int(seed)).shuffle(values)
            shuffled.append(values.tolist())
        print(json.dumps(shuffled))
    elif sys.argv[1] == "integers":
        generator, drawn = np.random.default_rng(int(sys.argv[2])), []
        for i in range(3, len(sys.argv), 4):
            low, high, n, dtype = sys.argv[i:i + 4]
            drawn.append(generator.integers(int(low), int(high), size=int(n),
                                            dtype=getattr(np, dtype)).tolist())
        print(json.dumps(drawn))
    elif sys.argv[1] == "check":
        with open(sys.argv[2]) as f:
            check(json.load(f))
    else:
        sys.exit(__doc__)
