#!/usr/bin/python3
"""Read TensorBoard event files as TensorBoard does, independently of mt's C code.

Written from the formats: TFRecord framing (uint64 little-endian length, masked CRC32C of
the length's 8 bytes, the data, masked CRC32C of the data; mask = rotate right 15 + 0xa282ead8)
with both checksums verified by crcmod's CRC-32C (python3-crcmod), and the tensorflow.Event /
Summary messages of TensorFlow's event.proto and summary.proto decoded by the google.protobuf
library (python3-protobuf) from descriptors built here by field number (not from mt's .proto).

usage: tfevents_read.py DIR_OR_FILE...
prints one JSON object per scalar: {"file", "tag", "step", "value", "wall_time"}; the first
record of each file must be file_version "brain.Event:2". Exits 1 with a message naming the
file and offset on any framing, checksum or decoding error.
"""
import glob
import json
import os
import struct
import sys

import crcmod.predefined
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    """tensorflow.Event and tensorflow.Summary with the field numbers of TensorFlow's files."""
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="tb_reader_event.proto", package="tbreader", syntax="proto3")

    summary = fd.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    value.field.add(name="node_name", number=7, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL, oneof_index=0)
    value.field.add(name="obsolete_old_style_histogram", number=3, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL,
                    oneof_index=0)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tbreader.Summary.Value")

    event = fd.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="graph_def", number=4, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, oneof_index=0,
                    type_name=".tbreader.Summary")

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("tbreader.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def fail(msg):
    print("tfevents_read: " + msg, file=sys.stderr)
    sys.exit(1)


def records(path):
    data = open(path, "rb").read()
    off = 0
    while off < len(data):
        if off + 12 > len(data):
            fail(f"{path}: offset {off}: truncated record header")
        head = data[off:off + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", data[off + 8:off + 12])
        if hcrc != masked(head):
            fail(f"{path}: offset {off}: length CRC {hcrc:#010x} != {masked(head):#010x}")
        if off + 12 + n + 4 > len(data):
            fail(f"{path}: offset {off}: truncated record of {n} bytes")
        body = data[off + 12:off + 12 + n]
        (dcrc,) = struct.unpack("<I", data[off + 12 + n:off + 16 + n])
        if dcrc != masked(body):
            fail(f"{path}: offset {off}: data CRC {dcrc:#010x} != {masked(body):#010x}")
        yield off, body
        off += 16 + n


def main():
    Event = event_class()
    files = []
    for a in sys.argv[1:]:
        files += sorted(glob.glob(os.path.join(a, "events.out.tfevents.*"))) if os.path.isdir(a) else [a]
    if not files:
        fail("no event files in " + " ".join(sys.argv[1:]))
    for path in files:
        first = True
        for off, body in records(path):
            ev = Event()
            try:
                ev.ParseFromString(body)
            except Exception as e:  # noqa: BLE001 (any decoding error is the answer)
                fail(f"{path}: offset {off}: not an Event: {e}")
            if first:
                if ev.WhichOneof("what") != "file_version" or ev.file_version != "brain.Event:2":
                    fail(f"{path}: the first event is not file_version brain.Event:2")
                first = False
                continue
            if ev.WhichOneof("what") != "summary":
                fail(f"{path}: offset {off}: an event that is not a summary")
            for v in ev.summary.value:
                if v.WhichOneof("value") != "simple_value":
                    fail(f"{path}: offset {off}: tag {v.tag!r} holds no simple_value")
                print(json.dumps({"file": os.path.basename(path), "tag": v.tag, "step": ev.step,
                                  "value": v.simple_value, "wall_time": ev.wall_time}))
        if first:
            fail(f"{path}: empty event file")


if __name__ == "__main__":
    main()
