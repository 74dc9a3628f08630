#!/usr/bin/env python3
"""Opens a beam-bpf HTML flame graph in headless Chromium, as a person would, and checks it.

    check_html.py FILE [--expect NAME] [--screenshot OUT.png] [--expect-other] [--max-depth N]

Checks that the file loads nothing from the network, that the page draws frames (in the DOM,
and as pixels on a screenshot), and that the search given in the URL (#search=...) marks
frames `match` and fills #matched. NAME is a literal piece of a frame's label that must be
found that way; without it, the search is for the heaviest frame under the root. With
--expect-other, the root's callees too narrow to draw (under 0.1% of the width each, counted
here from the profile data) must be drawn together as one box "other (N)". With --max-depth,
the call tree the page draws is at most N levels deep.

Prints one line and exits 0 when all is well, or prints one line saying what failed and
exits 1. Needs the Debian package `chromium`; Python's standard library otherwise.

Also the shared part of tests/consumers/check_speedscope.py: running Chromium and reading
its PNG screenshots.
"""
import argparse
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import urllib.parse
import zlib


class Failed(Exception):
    """What a check found wrong: printed as the one line of output."""


# --- Chromium ---------------------------------------------------------------------------

def chromium_binary():
    for name in (os.environ.get("BB_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise Failed("no Chromium found (apt-get install chromium, or set BB_CHROMIUM)")


def chromium(url, *, dump_dom=False, screenshot=None, budget_ms=5000, timeout=180):
    """Loads url headless; returns the DOM after `budget_ms` of virtual time (dump_dom), or
    writes a 1200x800 screenshot. A fresh profile each time, and the browser's own background
    traffic (updates, metrics) off: the only requests are the page's."""
    with tempfile.TemporaryDirectory(prefix="bb-chromium-") as profile:
        cmd = [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu",
               # WebGL (speedscope's flame chart) in software, as there is no GPU.
               "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
               "--user-data-dir=" + profile, "--no-first-run", "--no-default-browser-check",
               "--disable-extensions", "--disable-background-networking", "--disable-sync",
               "--disable-component-update", "--disable-default-apps", "--no-pings",
               "--hide-scrollbars", "--window-size=1200,800", "--force-device-scale-factor=1",
               f"--virtual-time-budget={budget_ms}"]
        if dump_dom:
            cmd.append("--dump-dom")
        if screenshot:
            cmd.append("--screenshot=" + os.path.abspath(screenshot))
        cmd.append(url)
        try:
            run = subprocess.run(cmd, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"chromium did not finish within {timeout} s on {url}")
        if run.returncode != 0:
            err = [l for l in run.stderr.decode(errors="replace").splitlines() if "ERROR" in l or "FATAL" in l]
            raise Failed(f"chromium exited {run.returncode}: {(err or ['no error output'])[-1]}")
        if screenshot and not os.path.exists(screenshot):
            raise Failed("chromium wrote no screenshot")
        return run.stdout.decode(errors="replace")


# --- screenshots ------------------------------------------------------------------------

def read_png(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG, as Chromium writes."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise Failed(f"{path} is not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        raise Failed(f"{path}: unexpected PNG format (depth {depth}, color type {color})")
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        # The five PNG filters; see the PNG specification, "Filter algorithms".
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def colors(rows, top=0):
    """Pixel count per color, from row `top` down."""
    count = {}
    for row in rows[top:]:
        for px in row:
            count[px] = count.get(px, 0) + 1
    return count


def saturated(px):
    return max(px) - min(px) >= 24  # speedscope's pastels are about 40 apart


def drawn(path, what, top=0, min_share=0.01, min_colors=3):
    """Fails unless the screenshot shows something below row `top`: at least min_share of the
    pixels not the background, in at least min_colors distinct saturated colors (frames are
    colored; text and grid lines are grey)."""
    _, _, rows = read_png(path)
    count = colors(rows, top)
    total = sum(count.values())
    background = max(count, key=count.get)
    other = total - count[background]
    tints = [c for c, n in count.items() if saturated(c) and n >= 20]
    if other < min_share * total or len(tints) < min_colors:
        raise Failed(f"{what} looks blank: {100 * other / total:.1f}% of pixels drawn, "
                     f"{len(tints)} colors (keep the screenshot with --screenshot)")
    return count


# --- the page ---------------------------------------------------------------------------

class Dom(html.parser.HTMLParser):
    """The frames (class "frame") of a dumped DOM, and the text of #matched."""

    def __init__(self):
        super().__init__()
        self.frames = []  # [classes, text]
        self.matched = None
        self.open = []  # what the text goes to, per open element: a frame, "matched", or None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if "frame" in classes:
            self.frames.append([classes, ""])
            self.open.append(self.frames[-1])
        elif a.get("id") == "matched":
            self.matched = ""
            self.open.append("matched")
        else:
            self.open.append(None)

    def handle_endtag(self, tag):
        if self.open:
            self.open.pop()

    def handle_data(self, data):
        target = next((t for t in reversed(self.open) if t is not None), None)
        if target == "matched":
            self.matched += data
        elif target is not None:
            target[1] += data


EXTERNAL = [
    re.compile(rb"(?i)\b(?:https?|ftp|wss?)://"),
    re.compile(rb"(?i)\b(?:src|href|action|poster)\s*=\s*[\"']?\s*//"),
    re.compile(rb"(?i)url\(\s*[\"']?\s*//"),
]


def profile_data(text):
    m = re.search(r'<script type="application/json" id="profile">(.*?)</script>', text, re.S)
    if not m:
        raise Failed("no profile data element in the page")
    try:
        return json.loads(m.group(1))
    except ValueError as e:
        raise Failed(f"the profile data is not JSON: {e}")


def heaviest_frame(data):
    """The label of the heaviest child of the root: always drawn, wide."""
    tree, best, best_total, current = data["tree"], None, -1, None
    totals = {}
    for i in range(0, len(tree), 3):
        frame, depth, self = tree[i:i + 3]
        if depth == 1:
            current = frame
        if depth >= 1:
            totals[current] = totals.get(current, 0) + self
    for frame, total in totals.items():
        if total > best_total:
            best, best_total = frame, total
    if best is None:
        raise Failed("the profile has no samples")
    return data["frames"][best]["name"]


def narrow_root_callees(data):
    """How many callees of the root weigh under the page's MIN_WIDTH (0.1%) of all."""
    tree, totals, current = data["tree"], [], None
    for i in range(0, len(tree), 3):
        _, depth, self = tree[i:i + 3]
        if depth == 1:
            totals.append(0)
        if depth >= 1:
            totals[-1] += self
    grand = sum(totals)
    return sum(1 for t in totals if t / grand < 0.001)


def js_regex_escape(text):
    return re.sub(r"([.*+?^${}()|\[\]\\/])", r"\\\1", text)


def check(path, expect=None, screenshot=None, expect_other=False, max_depth=None):
    with open(path, "rb") as f:
        raw = f.read()
    for pattern in EXTERNAL:
        m = pattern.search(raw)
        if m:
            raise Failed(f"the page refers to an external resource: {m.group(0).decode(errors='replace')!r}")
    data = profile_data(raw.decode("utf-8", errors="replace"))
    total = sum(data["tree"][2::3])
    if total != data["total"]:
        raise Failed(f"the tree holds {total} samples, the header says {data['total']}")

    depth = max(data["tree"][1::3])
    if max_depth is not None and depth > max_depth:
        raise Failed(f"the call tree is {depth} levels deep, more than {max_depth}")

    name = expect if expect is not None else heaviest_frame(data)
    url = "file://" + urllib.parse.quote(os.path.abspath(path)) + "#search=" + urllib.parse.quote(js_regex_escape(name), safe="")

    dom = Dom()
    dom.feed(chromium(url, dump_dom=True))
    if len(dom.frames) < 2:
        raise Failed(f"the page drew {len(dom.frames)} frames")
    if not any(text == "all" for _, text in dom.frames):
        raise Failed("the page drew no root frame 'all'")
    hits = [text for classes, text in dom.frames if "match" in classes]
    if not hits:
        raise Failed(f"searching {name!r} marked no frame 'match' ({len(dom.frames)} frames drawn)")
    if any(name not in text for text in hits):
        raise Failed(f"searching {name!r} marked a frame that does not match: {next(t for t in hits if name not in t)!r}")
    if not dom.matched or "%" not in dom.matched:
        raise Failed(f"searching {name!r} left #matched as {dom.matched!r}")
    other = ""
    if expect_other:
        narrow = narrow_root_callees(data)
        boxes = [text for classes, text in dom.frames if "other" in classes]
        if narrow < 2:
            raise Failed(f"only {narrow} callees of the root are too narrow to draw: nothing to gather")
        if f"other ({narrow})" not in boxes:
            raise Failed(f"{narrow} callees of the root are too narrow to draw; the 'other' boxes drawn: {boxes}")
        other = f", 'other ({narrow})' drawn"

    with tempfile.TemporaryDirectory(prefix="bb-flamegraph-") as tmp:
        shot = screenshot or os.path.join(tmp, "flamegraph.png")
        chromium(url, screenshot=shot)
        count = drawn(shot, "the flame graph", top=80)
        # The matched frames' color (.frame.match in flamegraph.html) is on screen.
        if count.get((0xe8, 0x3e, 0xe8), 0) < 50:
            raise Failed(f"searching {name!r}: no highlighted frame on the screenshot")
    return (f"ok: {len(dom.frames)} frames drawn, {len(hits)} matching {name!r}, {dom.matched.strip()}{other}, "
            f"{depth} levels")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--expect", help="a literal piece of a frame label the search must find")
    ap.add_argument("--screenshot", help="keep the screenshot here (PNG)")
    ap.add_argument("--expect-other", action="store_true", help="the root's narrow callees drawn as one 'other' box")
    ap.add_argument("--max-depth", type=int, help="the call tree's levels at most")
    args = ap.parse_args()
    try:
        print(check(args.file, args.expect, args.screenshot, args.expect_other, args.max_depth))
    except Failed as e:
        print(f"check_html: {args.file}: {e}")
        sys.exit(1)
    except (OSError, ValueError, KeyError) as e:
        print(f"check_html: {args.file}: {type(e).__name__}: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
