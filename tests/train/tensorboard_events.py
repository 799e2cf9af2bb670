"""Reads TensorBoard event files independently of tessel and checks them against --log-json.

    tensorboard_events.py TENSORBOARD_DIR LOG_JSON [tessel's TensorBoard flags]

The reader: TFRecord framing (uint64 length, masked CRC-32C of it, data, masked CRC-32C of the
data; every CRC checked with a CRC-32C computed here) around Event protobufs, parsed by Debian's
python3-protobuf from a schema built here with TensorBoard's published field numbers
(tensorboard/compat/proto/event.proto and summary.proto):
    Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
    Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
The expectation: Megatron-LM's tags and cadence (training_log and evaluate_and_print_results in
megatron/training/training.py), each value the --log-json record's as a float32, in the order
they were written. Exits 1 naming the first difference.
"""
import argparse
import glob
import json
import os
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def event_class():
    f = descriptor_pb2.FileDescriptorProto(name="tessel_test_event.proto", package="tessel_test", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto

    def message(name, fields):
        m = f.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            field = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name
        return m

    optional, repeated = T.LABEL_OPTIONAL, T.LABEL_REPEATED
    message("Value", [("tag", 1, T.TYPE_STRING, optional, None), ("simple_value", 2, T.TYPE_FLOAT, optional, None)])
    message("Summary", [("value", 1, T.TYPE_MESSAGE, repeated, ".tessel_test.Value")])
    message("Event", [("wall_time", 1, T.TYPE_DOUBLE, optional, None), ("step", 2, T.TYPE_INT64, optional, None),
                      ("file_version", 3, T.TYPE_STRING, optional, None),
                      ("summary", 5, T.TYPE_MESSAGE, optional, ".tessel_test.Summary")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    descriptor = pool.FindMessageTypeByName("tessel_test.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    blob = open(path, "rb").read()
    at = 0
    while at < len(blob):
        if len(blob) - at < 12:
            raise ValueError(f"{path}: {len(blob) - at} bytes left at {at}, less than a record's header")
        head = blob[at:at + 8]
        (length,) = struct.unpack("<Q", head)
        (head_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if head_crc != masked(head):
            raise ValueError(f"{path}: the length's CRC at byte {at} is wrong")
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        if len(data) != length or data_crc != masked(data):
            raise ValueError(f"{path}: the data's CRC of the record at byte {at} is wrong")
        yield data
        at += 16 + length


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected(log, a):
    """(tag, step, value) in the order Megatron writes them, from --log-json's records."""
    want = []
    its = [r for r in log if "split" not in r]
    samples = {r["iteration"]: r["consumed_samples"] for r in its}
    first = its[0]["iteration"]
    for r in log:
        it = r["iteration"]
        if "split" in r:  # an evaluation: the test split's too, under the validation's tags
            want += [("lm loss validation", it, r["loss"]), ("lm loss validation vs samples", samples[it], r["loss"])]
            if a.log_validation_ppl_to_tensorboard:
                want += [("lm loss validation ppl", it, r["ppl"]),
                         ("lm loss validation ppl vs samples", samples[it], r["ppl"])]
            continue
        n = r["consumed_samples"]
        if it % a.tensorboard_log_interval == 0:
            pairs = [("learning-rate", r["lr"]), ("batch-size", r["global_batch_size"]), ("lm loss", r["loss"])]
            if not a.no_log_loss_scale_to_tensorboard:
                pairs.append(("loss-scale", 1.0))
            if a.log_world_size_to_tensorboard:
                pairs.append(("world-size", r["world_size"]))
            pairs.append(("grad-norm", r["grad_norm"]))
            if a.log_num_zeros_in_grad:
                pairs.append(("num-zeros", r["num_zeros"]))
            if a.log_params_norm:
                pairs.append(("params-norm", r["params_norm"]))
            for tag, value in pairs:
                want += [(tag, it, value), (tag + " vs samples", n, value)]
            if a.log_memory_to_tensorboard:
                want += [("mem-reserved-bytes", it, r["memory_bytes"]),
                         ("mem-max-allocated-bytes", it, r["peak_memory_bytes"])]
        # Every iteration: the MoE routers' losses and each MTP depth's (Megatron's
        # track_moe_metrics and track_mtp_metrics).
        for tag in ("load_balancing_loss", "z_loss"):
            if tag in r:
                want.append((tag, it, r[tag]))
        for d, loss in enumerate(r.get("mtp_losses", [])):
            want.append((f"mtp_{d + 1} loss", it, loss))
        if (it % a.log_interval == 0 or it == first) and a.log_timers_to_tensorboard:
            if it != first:
                want.append(("iteration-time", it, r["interval_time_s"]))
            if a.log_throughput:
                want.append(("throughput", it, r["throughput"]))
    return [(tag, step, f32(value)) for tag, step, value in want]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("log_json")
    p.add_argument("--tensorboard-log-interval", type=int, default=1)
    p.add_argument("--log-interval", type=int, default=100)
    for flag in ["log-timers-to-tensorboard", "log-throughput", "log-params-norm", "log-num-zeros-in-grad",
                 "log-validation-ppl-to-tensorboard", "log-world-size-to-tensorboard", "log-memory-to-tensorboard",
                 "no-log-loss-scale-to-tensorboard"]:
        p.add_argument("--" + flag, action="store_true")
    a = p.parse_args()
    files = sorted(glob.glob(os.path.join(a.dir, "events.out.tfevents.*")))
    if len(files) != 1:
        sys.exit(f"FAIL: {len(files)} event files in {a.dir}, not the last rank's one: {files}")
    name = os.path.basename(files[0]).split(".")
    if len(name) < 5 or not (name[3].isdigit() and len(name[3]) == 10):
        sys.exit(f"FAIL: {files[0]} is not named events.out.tfevents.<10-digit time>.<host>...")
    Event = event_class()
    events = []
    for data in records(files[0]):
        e = Event()
        e.ParseFromString(data)
        events.append(e)
    if events[0].file_version != "brain.Event:2" or events[0].HasField("summary"):
        sys.exit(f"FAIL: the first event is not the file version: {events[0]}")
    got = []
    for e in events[1:]:
        if len(e.summary.value) != 1 or e.file_version:
            sys.exit(f"FAIL: an event holds other than one scalar: {e}")
        got.append((e.summary.value[0].tag, e.step, e.summary.value[0].simple_value))
    log = [json.loads(line) for line in open(a.log_json)]
    want = expected(log, a)
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            sys.exit(f"FAIL: event {i + 1} is {g}, --log-json says {w}")
    if len(got) != len(want):
        sys.exit(f"FAIL: {len(got)} scalars written, --log-json's records give {len(want)}: "
                 f"{(got if len(got) > len(want) else want)[min(len(got), len(want)):][:5]} ...")
    tags = sorted({t for t, _, _ in got})
    print(f"ok: {len(got)} scalars in {len(tags)} tags equal --log-json's: {', '.join(tags)}")


if __name__ == "__main__":
    main()
