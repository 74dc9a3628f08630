#!/usr/bin/env python3
"""Checks a beam-bpf pprof file with its real consumers: the upstream profile.proto (Debian's
golang-github-google-pprof-dev, compiled here with protoc for python3-protobuf) and
`go tool pprof` (Debian's golang-go).

    check_pprof.py FILE [--folded FILE.folded] [--top FILE.txt]

- every sample's locations, every location's function and mapping exist, and every location
  is used; frames of functions with a source file carry their line (all but 1%: the JIT has no
  line for a little code);
- `go tool pprof -top` reads the file, and its flat counts per function equal the ones the
  proto gives; with --folded (the same run's folded stacks), equal to the leaf counts there;
  with --top (the same run's top table), its flat% equal the table's SELF% to 0.1;
- `go tool pprof -traces` reads it, and its traces add up to the total;
- an allocation profile (-e alloc) has alloc_space in bytes, 8 per word, as its default sample
  type, and go tool pprof's alloc_space total is 8 times the words.

Prints one `ok: ...` line, or one line saying what failed and exits 1.
"""
import argparse
import collections
import gzip
import importlib
import os
import re
import subprocess
import sys
import tempfile

PROTO = "/usr/share/gocode/src/github.com/google/pprof/proto/profile.proto"


def fail(msg):
    print(f"check_pprof: {msg}")
    sys.exit(1)


def load_proto_module():
    # The generated module is imported, then its directory removed: nothing left in /tmp.
    with tempfile.TemporaryDirectory(prefix="bb_pprof_") as out:
        r = subprocess.run(["protoc", f"-I{os.path.dirname(PROTO)}", f"--python_out={out}", PROTO],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"protoc failed: {r.stderr.strip()}")
        sys.path.insert(0, out)
        module = importlib.import_module("profile_pb2")
        sys.path.remove(out)
        return module


def go_pprof(args, path, index):
    r = subprocess.run(["go", "tool", "pprof", f"-sample_index={index}", *args, path],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail(f"go tool pprof {' '.join(args)} failed: {r.stderr.strip().splitlines()[-1:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--folded")
    ap.add_argument("--top")
    a = ap.parse_args()

    pb = load_proto_module()
    with open(a.file, "rb") as f:
        raw = f.read()
    if raw[:2] != b"\x1f\x8b":
        fail("not gzip-compressed")
    p = pb.Profile()
    try:
        p.ParseFromString(gzip.decompress(raw))
    except Exception as e:  # truncated gzip, or not a Profile
        fail(f"cannot read the profile: {e}")
    s = p.string_table
    if not s or s[0] != "":
        fail("string_table[0] is not empty")
    types = [(s[t.type], s[t.unit]) for t in p.sample_type]
    if not types or types[0][1] != "count":
        fail(f"sample types {types}: the first must be a count")

    functions = {fn.id: fn for fn in p.function}
    mappings = {m.id: m for m in p.mapping}
    locations = {}
    for loc in p.location:
        if loc.mapping_id not in mappings:
            fail(f"location {loc.id} has no mapping")
        if len(loc.line) != 1 or loc.line[0].function_id not in functions:
            fail(f"location {loc.id} has no function")
        locations[loc.id] = s[functions[loc.line[0].function_id].name]

    flat = collections.Counter()
    total = 0
    # Frames of functions with a source file (Erlang's, from the JIT's line table) should carry
    # their line; the JIT has none for a little code (line 0 in its table), so a few may not.
    with_file = without_line = 0
    by_id = {loc.id: loc for loc in p.location}
    for smp in p.sample:
        if not smp.location_id or len(smp.value) != len(types):
            fail("a sample without locations or with the wrong number of values")
        for lid in smp.location_id:
            if lid not in locations:
                fail(f"sample refers to missing location {lid}")
            line = by_id[lid].line[0]
            if s[functions[line.function_id].filename]:
                with_file += smp.value[0]
                without_line += smp.value[0] if line.line <= 0 else 0
        flat[locations[smp.location_id[0]]] += smp.value[0]
        total += smp.value[0]
    if total == 0:
        fail("no samples")
    if without_line > with_file / 100:
        fail(f"{without_line} of {with_file} frames of functions with a source file have no line")
    used = {lid for smp in p.sample for lid in smp.location_id}
    if used != set(locations):
        fail(f"{len(set(locations) - used)} locations no sample uses")

    # go tool pprof -top: "flat flat% sum% cum cum% name" rows.
    index = types[0][0]  # samples, calls, or alloc_words (-e alloc)
    top = go_pprof(["-top", "-nodecount=100000", "-nodefraction=0", "-edgefraction=0"], a.file, index)
    go_flat = {}
    for line in top.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+)%\s+[\d.]+%\s+(\d+)\s+[\d.]+%\s+(.+)$", line)
        if m:
            go_flat[m.group(4)] = (int(m.group(1)), float(m.group(2)))
    go_counts = {name: c for name, (c, _) in go_flat.items() if c}
    mine = {name: c for name, c in flat.items() if c}
    if go_counts != mine:
        diff = {k: (mine.get(k), go_counts.get(k)) for k in set(mine) | set(go_counts) if mine.get(k) != go_counts.get(k)}
        fail(f"go tool pprof -top flat counts differ from the proto's (proto, go): {dict(list(diff.items())[:5])}")

    if a.folded:
        leaf = collections.Counter()
        with open(a.folded) as f:
            for line in f:
                stack, _, count = line.rstrip("\n").rpartition(" ")
                leaf[stack.split(";")[-1]] += int(count)
        if dict(leaf) != mine:
            diff = {k: (leaf.get(k), mine.get(k)) for k in set(leaf) | set(mine) if leaf.get(k) != mine.get(k)}
            fail(f"leaf counts of the folded stacks differ from pprof's flat counts (folded, pprof): {dict(list(diff.items())[:5])}")

    if a.top:
        rows = 0
        with open(a.top) as f:
            for line in f:
                m = re.match(r"\s*([\d.]+)\s+([\d.]+)\s+(.+)$", line)
                if not m:
                    continue
                self_pct, name = float(m.group(1)), m.group(3)
                pct = go_flat.get(name, (0, 0.0))[1]
                if abs(pct - self_pct) > 0.1 + 1e-9:
                    fail(f"{name}: SELF% {self_pct} in the top table, flat {pct}% in go tool pprof")
                rows += 1
        if rows == 0:
            fail("no rows in the top table")

    traces = go_pprof(["-traces"], a.file, index)
    # Each trace: its labels ("       pid:  <0.79.0>"), then its value and leaf ("      12   f/1").
    traced = 0
    for block in re.split(r"^-+\+-+$", traces, flags=re.M)[1:]:
        for line in block.splitlines():
            m = re.match(r"\s+(\d+)\s+\S", line)
            if m:
                traced += int(m.group(1))
                break
    if traced != total:
        fail(f"go tool pprof -traces adds up to {traced}, the samples to {total}")

    # An allocation profile: space in bytes next to the words, and pprof's default view.
    if ("alloc_space", "bytes") in types:
        k = types.index(("alloc_space", "bytes"))
        if any(smp.value[k] != 8 * smp.value[0] for smp in p.sample):
            fail("alloc_space is not 8 bytes per word of alloc_words")
        if s[p.default_sample_type] != "alloc_space":
            fail(f"default sample type {s[p.default_sample_type]!r}, not alloc_space")
        space = go_pprof(["-top", "-nodecount=100000", "-nodefraction=0", "-unit=B"], a.file, "alloc_space")
        m = re.search(r"of ([\d.]+)B total", space)
        if not m or abs(float(m.group(1)) - 8 * total) > 1e-6 * 8 * total + 1:
            fail(f"go tool pprof -sample_index=alloc_space total is not {8 * total} B: {space.splitlines()[:6]}")

    print(f"ok: {total} {types[0][0]} in {len(p.sample)} distinct stacks, {len(locations)} locations, "
          f"{len(functions)} functions; go tool pprof -top and -traces agree")


if __name__ == "__main__":
    main()
