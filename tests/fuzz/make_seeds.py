#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/<target>/ and the libFuzzer
dictionaries tests/fuzz/<target>.dict.

Both are committed; run this again to change them or after fields were added
to proto/tessera/v1/tessera.proto (the spec dictionaries list its field names).
It replaces the seed_* files of every corpus. Every seed is small (a few KB at
most) and built here, so nothing is downloaded. The input formats are described
at the top of each *_fuzzer.cc.

Usage: tests/fuzz/make_seeds.py
"""
import gzip
import io
import json
import pathlib
import re
import struct
import tarfile
import zlib

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
EXAMPLES = HERE.parent.parent / "examples"
PROTO = HERE.parent.parent / "proto" / "tessera" / "v1" / "tessera.proto"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / f"seed_{name}").write_bytes(data)


def clear(target):
    d = CORPUS / target
    if d.exists():
        for f in d.glob("seed_*"):
            f.unlink()


# ---- job specs: YAML, then NUL-separated --set overrides ----

MINIMAL_JOB = """name: j
world_size: 2
trainer:
  model: vit-micro
  dataset: synthetic
  batch_size: 8
  epochs: 1
"""

FULL_JOB = """name: full
world_size: 4
priority: 3
max_restarts: 2
placement: spread
nodes: 2
per_node: 2
trainer:
  model: vit-micro
  dataset: fashion-mnist
  data_dir: /usr/share/datasets/fashion-mnist
  epochs: 2
  max_steps: 100
  batch_size: 64
  lr: 0.003
  train_subset: 1000
  test_subset: 100
  allreduce: true
  metrics_every: 10
  seed: 1
  threads: 1
  weight_decay: 0.05
  optimizer: sgd
  momentum: 0.9
  warmup_steps: 5
  label_smoothing: 0.1
  grad_accum: 2
  clip_grad_norm: 1.0
  precision: fp32
  scaling: weak
  weak_fraction: 0.5
  checkpoint_dir: /tmp/ckpt
  checkpoint_every: 50
  resume: yes
  dropout: 0.1
  bucket_cap_mb: 25
  image_size: 32
  augment: off
  device: cpu
  data_workers: 2
  first_bucket_mb: 1
  overlap: false
"""


def job_specs():
    t = "job_spec_fuzzer"
    clear(t)
    write(t, "minimal", MINIMAL_JOB)
    write(t, "full", FULL_JOB)
    for example in sorted(EXAMPLES.glob("*.yaml")):
        text = example.read_text()
        if "grid:" not in text:
            write(t, "example_" + example.stem, text)
    write(t, "overrides", MINIMAL_JOB + "\0trainer.epochs=3\0name=renamed\0trainer.lr=0.01")
    write(t, "override_new_map", "name: j\n\0trainer.model=vit-micro\0trainer.augment=true")
    write(t, "override_empty_spec", "\0name=x\0world_size=1")
    write(t, "override_quoted", MINIMAL_JOB + "\0name='yes'\0trainer.data_dir=\"a: b\"")
    write(t, "override_not_map", MINIMAL_JOB + "\0name.x=1")
    write(t, "flow_style", "{name: f, world_size: 1, trainer: {model: m, dataset: d, "
                           "batch_size: 1, max_steps: 5}}")
    write(t, "anchors", "name: &n a\nworld_size: 1\ntrainer: &t\n  model: *n\n"
                        "  dataset: synthetic\n  batch_size: 1\n  epochs: 1\n")
    write(t, "unknown_field", MINIMAL_JOB + "colour: blue\n")
    write(t, "wrong_type", "name: [a, b]\nworld_size: two\n")
    write(t, "negative", MINIMAL_JOB.replace("batch_size: 8", "batch_size: -4"))
    write(t, "huge_int", MINIMAL_JOB.replace("world_size: 2", "world_size: 99999999999"))
    write(t, "nan", MINIMAL_JOB + "  lr: .nan\n")
    write(t, "duplicate", MINIMAL_JOB + "name: again\n")
    write(t, "malformed", "name: [unclosed\n  - x: {")
    write(t, "top_list", "- name: j\n- world_size: 1\n")
    write(t, "escapes", 'name: "tab\\there \\u00e9 \\x41"\nworld_size: 1\n')
    write(t, "tags", "name: !!str 12\nworld_size: !!int 3\n")


# ---- sweep specs: YAML ----

BASE = """base:
  trainer:
    model: vit-micro
    dataset: synthetic
    epochs: 1
    batch_size: 8
"""


def sweep_specs():
    t = "sweep_spec_fuzzer"
    clear(t)
    write(t, "header_example", """name: vit-micro-scaling
repeats: 2
max_parallel: 1
grid:
  world_size: [1, 2, 4]
  batch_size: [32, 64]
  scaling: [strong, weak]
  shape: [pack]
""" + BASE)
    write(t, "minimal", "name: s\n" + BASE.replace("epochs: 1", "epochs: 1\n  world_size: 2"))
    write(t, "nxm_shapes", "name: shapes\ngrid:\n  shape: [1x2, 2x1, 2x2, spread]\n" + BASE)
    write(t, "base_shape", "name: b\n" + BASE + "  nodes: 2\n  per_node: 1\n  world_size: 2\n")
    write(t, "repeats", "name: r\nrepeats: 100\ngrid:\n  world_size: [1, 2]\n" + BASE)
    write(t, "too_many", "name: big\nrepeats: 100\ngrid:\n  world_size: [1, 2, 3, 4, 5, 6, 7, 8]\n"
                         "  batch_size: [1, 2]\n" + BASE)
    write(t, "shape_and_sizes", "name: x\ngrid:\n  world_size: [2]\n  shape: [1x2]\n" + BASE)
    write(t, "duplicates", "name: d\ngrid:\n  world_size: [2, 2]\n  scaling: [weak, weak]\n" + BASE)
    write(t, "bad_values", "name: v\ngrid:\n  world_size: [0, -1]\n  scaling: [medium]\n"
                           "  shape: [0x2, x, 2x]\n" + BASE)
    write(t, "zero_stages", "name: z\ngrid:\n  world_size: [1, 2]\n  zero_stage: [0, 1, 2]\n" + BASE)
    write(t, "bad_zero_stages", "name: z\ngrid:\n  zero_stage: [3, -1, 1, 1]\n" + BASE)
    write(t, "no_base", "name: n\ngrid:\n  world_size: [1]\n")
    write(t, "long_name", "name: " + "n" * 126 + "\ngrid:\n  world_size: [1, 2]\n" + BASE)
    write(t, "flow", "{name: f, grid: {batch_size: [4]}, base: {world_size: 1, trainer: "
                     "{model: m, dataset: d, max_steps: 3}}}")
    for example in sorted(EXAMPLES.glob("*.yaml")):
        text = example.read_text()
        if "grid:" in text:
            write(t, "example_" + example.stem, text)


# ---- dataset files: mode byte, limit byte, file ----

CIFAR10_TEST, CIFAR10_TRAIN, CIFAR100_TEST, CIFAR100_TRAIN = 0, 1, 2, 3
IDX1, IDX3, FASHION_TEST, FASHION_TRAIN = 4, 5, 6, 7


def cifar_record(labels, seed):
    pixels = bytes((seed * 31 + i * 7) % 256 for i in range(3072))
    return bytes(labels) + pixels


def idx(dims, payload):
    return struct.pack(">BBBB", 0, 0, 8, len(dims)) + b"".join(
        struct.pack(">I", d) for d in dims) + payload


def gz(data):
    return gzip.compress(data, compresslevel=9, mtime=0)


def fashion(images, labels):
    return struct.pack(">H", len(images)) + images + labels


def datasets():
    t = "dataset_fuzzer"
    clear(t)
    c10 = cifar_record([3], 1) + cifar_record([9], 2)
    write(t, "cifar10_test_2", bytes([CIFAR10_TEST, 0]) + c10)
    write(t, "cifar10_train_limit3", bytes([CIFAR10_TRAIN, 3]) + c10[:3073])
    write(t, "cifar10_bad_label", bytes([CIFAR10_TEST, 0]) + cifar_record([10], 3))
    write(t, "cifar10_truncated", bytes([CIFAR10_TEST, 0]) + c10[:3000])
    write(t, "cifar100_test", bytes([CIFAR100_TEST, 0]) + cifar_record([19, 99], 4))
    write(t, "cifar100_train", bytes([CIFAR100_TRAIN, 0]) + cifar_record([2, 42], 5))
    write(t, "cifar100_bad_coarse", bytes([CIFAR100_TEST, 0]) + cifar_record([20, 1], 6))
    labels = bytes([0, 1, 2, 9, 5])
    images = bytes(range(5 * 4 * 3))
    write(t, "idx1", bytes([IDX1, 0]) + idx([5], labels))
    write(t, "idx1_gz", bytes([IDX1, 0]) + gz(idx([5], labels)))
    write(t, "idx3", bytes([IDX3, 0]) + idx([5, 4, 3], images))
    write(t, "idx3_gz", bytes([IDX3, 0]) + gz(idx([5, 4, 3], images)))
    write(t, "idx3_zero_dim", bytes([IDX3, 0]) + idx([0, 28, 28], b""))
    write(t, "idx3_trailing", bytes([IDX3, 0]) + idx([1, 2, 2], b"abcdX"))
    write(t, "idx3_lying_header", bytes([IDX3, 0]) + idx([1000, 28, 28], b"short"))
    write(t, "idx_bad_type", bytes([IDX1, 0]) + bytes([0, 0, 0x0d, 1, 0, 0, 0, 1]) + b"\0\0\0\0")
    write(t, "idx_gz_truncated", bytes([IDX1, 0]) + gz(idx([5], labels))[:-6])
    write(t, "fashion_test", bytes([FASHION_TEST, 0]) +
          fashion(idx([5, 4, 3], images), idx([5], labels)))
    write(t, "fashion_train_gz_limit2", bytes([FASHION_TRAIN, 2]) +
          fashion(gz(idx([5, 4, 3], images)), gz(idx([5], labels))))
    write(t, "fashion_count_mismatch", bytes([FASHION_TEST, 0]) +
          fashion(idx([5, 4, 3], images), idx([4], labels[:4])))
    write(t, "fashion_bad_label", bytes([FASHION_TEST, 0]) +
          fashion(idx([5, 4, 3], images), idx([5], bytes([0, 1, 2, 10, 5]))))


# ---- safetensors files: the whole input is the file ----


def safetensors(entries, metadata=None, extra=b"", header_text=None):
    """entries: (name, dtype, shape, raw bytes), laid out in order."""
    header, offset, data = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    text = header_text if header_text is not None else json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data + extra


def safetensors_files():
    t = "safetensors_fuzzer"
    clear(t)
    f32 = struct.pack("<6f", 1, -2, 3.5, 0, 1e-3, 7)
    write(t, "f32_metadata", safetensors(
        [("patch_embed.proj.weight", "F32", [2, 3], f32)],
        {"format": "pt", "class_names": '["cat", "dog"]'}))
    write(t, "mixed_dtypes", safetensors(
        [("a", "F16", [2], struct.pack("<2e", 0.5, -1.5)),
         ("b", "BF16", [1], b"\x80\x3f"),
         ("c", "F64", [1], struct.pack("<d", 0.1)),
         ("d", "I64", [1], struct.pack("<q", -42)),
         ("e", "U8", [3], b"xyz"),
         ("f", "I32", [0, 5], b""),
         ("g", "BOOL", [], b"\x01")]))
    write(t, "empty", safetensors([]))
    write(t, "overlap", safetensors([], header_text=json.dumps(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode(),
        extra=bytes(12)))
    write(t, "duplicate", safetensors([], header_text=(
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'), extra=b"ab"))
    write(t, "shape_mismatch", safetensors([("w", "F32", [3], f32[:8])]))
    write(t, "truncated", safetensors([("w", "F32", [6], f32)])[:-5])
    write(t, "huge_header", struct.pack("<Q", 1 << 40) + b"{}")


# ---- image data layer: mode byte, then a tar archive or an image ----


def png(width, height, gray=False):
    rows = b""
    for y in range(height):
        px = bytes((x * 40 + y * 7) % 256 for x in range(width * (1 if gray else 3)))
        rows += b"\x00" + px
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0 if gray else 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def jpeg(width, height, gray=False):
    try:
        from PIL import Image  # python3-pil; the JPEG seeds are left out without it
    except ImportError:
        return None
    img = Image.new("L" if gray else "RGB", (width, height))
    img.putdata([((x * 40 + y * 7) % 256) if gray else ((x * 40) % 256, (y * 9) % 256, 128)
                 for y in range(height) for x in range(width)])
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90)
    return out.getvalue()


def tar_of(members, fmt=tarfile.USTAR_FORMAT):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def data_files():
    t = "data_fuzzer"
    clear(t)
    image = png(6, 4)
    shard = [("00000000.png", image), ("00000000.cls", b"3"), ("00000001.png", png(3, 3, True)),
             ("00000001.cls", b"0")]
    write(t, "tar_ustar", b"\x00" + tar_of(shard))
    write(t, "tar_gnu_longname", b"\x00" + tar_of([("d/" * 60 + "x.cls", b"1")],
                                                   tarfile.GNU_FORMAT))
    write(t, "tar_pax", b"\x00" + tar_of([("p" * 120 + ".cls", b"2")], tarfile.PAX_FORMAT))
    write(t, "tar_truncated", b"\x00" + tar_of(shard)[:700])
    write(t, "png", b"\x01" + image)
    write(t, "png_gray", b"\x01" + png(5, 5, True))
    write(t, "png_truncated", b"\x01" + image[:40])
    write(t, "png_region", b"\x02" + bytes([1, 1, 2, 2, 2, 2]) + png(8, 8))
    write(t, "png_transform", b"\x03\x07" + png(8, 6))
    for name, data in [("jpeg", jpeg(16, 12)), ("jpeg_gray", jpeg(16, 16, True))]:
        if data is None:
            continue
        write(t, name, b"\x01" + data)
        write(t, name + "_region", b"\x02" + bytes([2, 2, 9, 7, 4, 3]) + data)
        write(t, name + "_transform", b"\x03\x10" + data)
        write(t, name + "_truncated", b"\x01" + data[: len(data) // 2])


# ---- HTTP requests: NUL-separated, each "METHOD TARGET", headers, blank line, body ----


def req(method, target, headers=(), body=""):
    lines = [f"{method} {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers]
    return "\r\n".join(lines) + "\r\n\r\n" + body


# $USER and $JOIN stand for the fixture's tokens (see http_api_fuzzer.cc).
AUTH = [("Authorization", "Bearer $USER")]


def http_requests():
    t = "http_api_fuzzer"
    clear(t)
    write(t, "healthz", req("GET", "/healthz"))
    write(t, "index", req("GET", "/"))
    write(t, "head_script", req("HEAD", "/app.js"))
    write(t, "static_post", req("POST", "/"))
    write(t, "jobs", req("GET", "/api/v1/jobs"))
    write(t, "jobs_filtered", req("GET", "/api/v1/jobs?state=running&limit=2&sweep=1"))
    write(t, "jobs_bad_state", req("GET", "/api/v1/jobs?state=JOB_STATE_BOGUS&limit=-1"))
    write(t, "job", req("GET", "/api/v1/jobs/1"))
    write(t, "job_missing", req("GET", "/api/v1/jobs/999"))
    write(t, "job_bad_id", req("GET", "/api/v1/jobs/-1x"))
    write(t, "metrics", req("GET", "/api/v1/jobs/1/metrics?name=loss&after_step=5&limit=10"))
    write(t, "metrics_bad", req("GET", "/api/v1/jobs/1/metrics?after_step=9223372036854775808"))
    write(t, "logs", req("GET", "/api/v1/jobs/1/logs?rank=0&attempt=1&offset=3&max_bytes=100"))
    write(t, "logs_tail", req("GET", "/api/v1/jobs/2/logs?rank=0&tail_bytes=4"))
    write(t, "workers", req("GET", "/api/v1/workers"))
    write(t, "sweeps", req("GET", "/api/v1/sweeps"))
    write(t, "sweep", req("GET", "/api/v1/sweeps/1"))
    write(t, "sweep_report", req("GET", "/api/v1/sweeps/1/report"))
    write(t, "cancel", req("POST", "/api/v1/jobs/1/cancel", AUTH) + "\0" +
          req("GET", "/api/v1/jobs/1"))
    write(t, "cancel_twice", req("POST", "/api/v1/jobs/3/cancel", AUTH) + "\0" +
          req("POST", "/api/v1/jobs/2/cancel", AUTH))
    write(t, "cancel_no_auth", req("POST", "/api/v1/jobs/1/cancel"))
    write(t, "cancel_get", req("GET", "/api/v1/jobs/1/cancel"))
    write(t, "cancel_sweep", req("POST", "/api/v1/sweeps/1/cancel", AUTH) + "\0" +
          req("GET", "/api/v1/sweeps/1/report"))
    write(t, "delete", req("DELETE", "/api/v1/jobs/1"))
    write(t, "stream_jobs", req("GET", "/api/v1/stream/jobs?state=queued&limit=3"))
    write(t, "stream_job", req("GET", "/api/v1/stream/jobs/1"))
    write(t, "stream_job_done", req("GET", "/api/v1/stream/jobs/2"))
    write(t, "stream_workers", req("GET", "/api/v1/stream/workers"))
    write(t, "stream_sweep", req("GET", "/api/v1/stream/sweeps/1"))
    write(t, "encoded", req("GET", "/api/v1/jobs/%31/metrics?na%6De=lo+ss&limit=1&limit=2"))
    write(t, "no_route", req("GET", "/api/v2/jobs") + "\0" + req("GET", "/api//v1//jobs//1"))
    write(t, "session", req("POST", "/api/v1/session", AUTH) + "\0" +
          req("DELETE", "/api/v1/session"))
    write(t, "session_bad", req("POST", "/api/v1/session", [("Authorization", "Bearer a;b")]))
    write(t, "cookie_read", req("GET", "/api/v1/jobs/1", [("Cookie", "x=1; tessera_token=$USER")]))
    write(t, "cookie_write", req("POST", "/api/v1/jobs/1/cancel",
                                 [("Cookie", "tessera_token=$USER")]))
    write(t, "join_token", req("GET", "/api/v1/workers", [("Authorization", "Bearer $JOIN")]))
    write(t, "bad_tokens", req("GET", "/api/v1/jobs", [("Authorization", "Bearer tsr_user_1_00")])
          + "\0" + req("GET", "/api/v1/jobs", [("Authorization", "Basic dXNlcg==")])
          + "\0" + req("GET", "/api/v1/jobs", [("Authorization", "Bearer tsr_user_x_y_z")]))
    write(t, "post_body", req("POST", "/api/v1/jobs", AUTH + [("Content-Type", "application/json")],
                              '{"spec_yaml": "name: x"}'))


# ---- dictionaries ----


def proto_fields(*messages):
    text = PROTO.read_text()
    names = []
    for message in messages:
        body = re.search(r"message %s \{(.*?)\n\}" % message, text, re.S).group(1)
        names += re.findall(r"^\s*(?:optional |repeated )?\w+ (\w+) = \d+;", body, re.M)
    return names


def escape(token):
    out = ""
    for b in token.encode("latin-1"):
        out += chr(b) if 0x20 <= b < 0x7f and chr(b) not in '"\\' else "\\x%02x" % b
    return out


def write_dict(target, comment, tokens):
    seen = []
    for t in tokens:
        if t not in seen:
            seen.append(t)
    lines = [f"# {comment}", "# Generated by make_seeds.py."]
    lines += [f'"{escape(t)}"' for t in seen]
    (HERE / f"{target}.dict").write_text("\n".join(lines) + "\n")


YAML_TOKENS = [": ", "- ", "---", "...", "\n  ", "{", "}", "[", "]", ", ", "? ", "&a ", "*a",
               "!!str ", "!!int ", "!!map", "<<: ", "|", ">-", "'", '"', "#", "~", "null",
               "true", "false", "yes", "off", ".nan", ".inf", "-.inf", "0x1f", "1e309",
               "-1", "2147483648", "9223372036854775808", "\\u00e9", "\\x00", "\t"]
SPEC_VALUES = ["pack", "spread", "adamw", "sgd", "fp32", "bf16", "fp16", "strong", "weak",
               "auto", "cpu", "cuda", "vit-micro", "synthetic", "fashion-mnist", "cifar10"]


def dictionaries():
    job = proto_fields("JobSpec", "TrainerConfig")
    write_dict("job_spec_fuzzer", "Job spec YAML keys and values, --set overrides.",
               [f + ": " for f in job] + ["trainer.", "\0", "="] +
               [f"trainer.{f}=" for f in proto_fields("TrainerConfig")] +
               YAML_TOKENS + SPEC_VALUES)
    sweep = proto_fields("SweepSpec", "SweepGrid")
    write_dict("sweep_spec_fuzzer", "Sweep spec YAML keys and values.",
               [f + ": " for f in sweep + job] +
               ["1x2", "2x2", "0x1", "65536", "46341", "2147483647", "4294967296"] +
               YAML_TOKENS + SPEC_VALUES)
    write_dict("dataset_fuzzer", "IDX headers, gzip and CIFAR labels.",
               ["\x00\x00\x08\x01", "\x00\x00\x08\x03", "\x1f\x8b\x08\x00",
                "\x00\x00\x00\x1c", "\x00\x00\xea\x60", "\xff\xff\xff\xff",
                "\x10\x00\x00\x00"])
    write_dict("safetensors_fuzzer", "safetensors header keys, dtypes and lengths.",
               ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"F32"', '"F16"',
                '"BF16"', '"F64"', '"I64"', '"I32"', '"U8"', '"BOOL"', '":', '{', '}', '[',
                ']', ',', "18446744073709551615", "9223372036854775808", "-1", "0",
                "\x00\x00\x00\x00\x00\x00\x00\x00"])
    write_dict("http_api_fuzzer", "HTTP request pieces and API routes.",
               ["GET ", "POST ", "HEAD ", "PUT ", "DELETE ", "OPTIONS ", " HTTP/1.1\r\n",
                "\r\n\r\n", "\0", "/healthz", "/api/v1/", "jobs", "jobs/", "workers",
                "sweeps", "sweeps/", "stream/", "/metrics", "/logs", "/cancel", "/report",
                "?", "&", "=", "%2F", "%00", "%", "+", "..", "//",
                "state=", "limit=", "sweep=", "name=", "after_step=", "rank=", "attempt=",
                "offset=", "max_bytes=", "tail_bytes=", "running", "JOB_STATE_QUEUED",
                "Authorization: Bearer $USER\r\n", "Authorization: Bearer $JOIN\r\n",
                "Cookie: tessera_token=$USER\r\n", "Bearer ", "tsr_user_", "tsr_join_",
                "session", "Content-Type: application/json\r\n",
                "Content-Length: 0\r\n", "9223372036854775807", "-1", "0", "1", "2",
                "4194304", "100001"])


def main():
    job_specs()
    sweep_specs()
    datasets()
    safetensors_files()
    data_files()
    http_requests()
    dictionaries()


if __name__ == "__main__":
    main()
