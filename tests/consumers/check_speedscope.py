#!/usr/bin/env python3
"""Checks a beam-bpf speedscope file with speedscope itself.

    check_speedscope.py FILE [--screenshot OUT.png] [--cache DIR]

1. Validates FILE against the file format's JSON schema, as shipped in speedscope's npm
   package (dist/release/file-format-schema.json), plus what the schema cannot say and the
   app relies on: frame indices in range, one weight per sample.
2. Opens it in the real speedscope app from that package in headless Chromium, the page and
   the profile served over HTTP on 127.0.0.1 only (speedscope's #profileURL= needs HTTP),
   and checks that the profile loaded (its name shown, no error) and that the flame chart is
   drawn (the screenshot is not blank).

The package (pinned below) is installed with npm into the cache directory when it is not
there yet: $BB_SPEEDSCOPE_DIR, else /var/tmp/beam-bpf-speedscope. Needs the Debian packages
`chromium` and `npm`; Python's standard library otherwise.

Prints one line and exits 0 when all is well, or prints one line saying what failed and
exits 1.
"""
import argparse
import contextlib
import fcntl
import functools
import html
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_html import Failed, chromium, drawn  # noqa: E402  (the shared browser part)

SPEEDSCOPE_VERSION = "1.25.0"
DEFAULT_CACHE = "/var/tmp/beam-bpf-speedscope"


# --- the package ------------------------------------------------------------------------

def speedscope_app(cache):
    """The directory of speedscope's built web app (index.html, the schema), installing the
    pinned version first if the cache does not have it. A lock keeps concurrent checks from
    installing over each other."""
    os.makedirs(cache, exist_ok=True)
    package = os.path.join(cache, "node_modules", "speedscope")
    app = os.path.join(package, "dist", "release")

    def installed():
        try:
            with open(os.path.join(package, "package.json")) as f:
                version = json.load(f).get("version")
        except (OSError, ValueError):
            return False
        return version == SPEEDSCOPE_VERSION and os.path.exists(os.path.join(app, "index.html"))

    with open(os.path.join(cache, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed():
            npm = shutil.which("npm")
            if not npm:
                raise Failed("speedscope is not installed and there is no npm (apt-get install npm)")
            run = subprocess.run([npm, "install", "--prefix", cache, "--no-audit", "--no-fund",
                                  "--loglevel=error", f"speedscope@{SPEEDSCOPE_VERSION}"],
                                 capture_output=True, text=True, timeout=600)
            if run.returncode != 0 or not installed():
                last = (run.stderr.strip().splitlines() or ["no output"])[-1]
                raise Failed(f"npm install speedscope@{SPEEDSCOPE_VERSION} into {cache} failed: {last}")
    return app


# --- the schema ---------------------------------------------------------------------------

# JSON Schema keywords this validator implements: all that the file format's schema uses.
# Any other keyword fails the check rather than being skipped, so a newer schema can't pass
# unchecked.
KNOWN = {"$schema", "$ref", "definitions", "title", "description", "type", "properties",
         "required", "const", "enum", "items", "anyOf"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def validate(value, schema, root, where="$"):
    """Returns None if value satisfies schema, else a description of the first violation."""
    unknown = set(schema) - KNOWN
    if unknown:
        raise Failed(f"the schema uses {sorted(unknown)}, which this checker does not implement")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            raise Failed(f"the schema refers outside itself: {ref}")
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        error = validate(value, target, root, where)
        if error:
            return error
    if "type" in schema and not TYPES[schema["type"]](value):
        return f"{where}: not of type {schema['type']}: {json.dumps(value)[:80]}"
    if "const" in schema and value != schema["const"]:
        return f"{where}: must be {json.dumps(schema['const'])}, is {json.dumps(value)[:80]}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: must be one of {schema['enum']}, is {json.dumps(value)[:80]}"
    if "anyOf" in schema:
        errors = [validate(value, s, root, where) for s in schema["anyOf"]]
        if all(errors):
            return f"{where}: matches none of its allowed forms: " + "; ".join(errors)
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                return f"{where}: lacks {key!r}"
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                error = validate(value[key], sub, root, f"{where}.{key}")
                if error:
                    return error
    if isinstance(value, list) and "items" in schema:
        items = schema["items"]
        if items == {"type": "number"}:  # fast path: samples and weights are long
            for i, v in enumerate(value):
                if not TYPES["number"](v):
                    return f"{where}[{i}]: not a number: {json.dumps(v)[:80]}"
        else:
            for i, v in enumerate(value):
                error = validate(v, items, root, f"{where}[{i}]")
                if error:
                    return error
    return None


def check_file(profile, schema):
    error = validate(profile, schema, schema)
    if error:
        raise Failed(f"not valid against speedscope's schema: {error}")
    frames = len(profile["shared"]["frames"])
    if not profile["profiles"]:
        raise Failed("the file holds no profile")
    active = profile.get("activeProfileIndex", 0)
    if not 0 <= active < len(profile["profiles"]):
        raise Failed(f"activeProfileIndex {active} is out of range")
    for n, p in enumerate(profile["profiles"]):
        if p["type"] != "sampled":
            continue
        if len(p["samples"]) != len(p["weights"]):
            raise Failed(f"profile {n}: {len(p['samples'])} samples but {len(p['weights'])} weights")
        for s in p["samples"]:
            bad = [f for f in s if not (isinstance(f, int) and 0 <= f < frames)]
            if bad:
                raise Failed(f"profile {n}: a sample refers to frame {bad[0]} of {frames}")
        if any(w < 0 for w in p["weights"]):
            raise Failed(f"profile {n}: a negative weight")
        if not p["samples"]:
            raise Failed(f"profile {n} ({p['name']!r}) has no samples")


# --- the app ------------------------------------------------------------------------------

@contextlib.contextmanager
def serve(directory):
    """An HTTP server for `directory` on 127.0.0.1 and a free port, for as long as needed."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=directory))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def check(path, screenshot=None, cache=None):
    app = speedscope_app(cache or os.environ.get("BB_SPEEDSCOPE_DIR") or DEFAULT_CACHE)
    with open(os.path.join(app, "file-format-schema.json")) as f:
        schema = json.load(f)
    with open(path, "rb") as f:
        text = f.read()
    try:
        profile = json.loads(text)
    except ValueError as e:
        raise Failed(f"not JSON: {e}")
    check_file(profile, schema)
    name = profile["profiles"][profile.get("activeProfileIndex", 0)]["name"]

    with tempfile.TemporaryDirectory(prefix="bb-speedscope-") as tmp:
        os.symlink(app, os.path.join(tmp, "app"))
        with open(os.path.join(tmp, "profile.json"), "wb") as f:
            f.write(text)
        with serve(tmp) as base:
            url = f"{base}/app/index.html#profileURL=" + urllib.parse.quote(f"{base}/profile.json", safe="")
            dom = chromium(url, dump_dom=True, budget_ms=10000)
            if "Something went wrong" in dom:
                raise Failed("speedscope could not load the profile: 'Something went wrong'")
            if "Drag and drop a profile file" in dom or "<canvas" not in dom:
                raise Failed("speedscope shows no profile (still on its start page)")
            if name not in dom and html.escape(name, quote=False) not in dom:
                raise Failed(f"speedscope does not show the profile's name {name!r}")
            shot = screenshot or os.path.join(tmp, "speedscope.png")
            chromium(url, screenshot=shot, budget_ms=10000)
            # Below speedscope's toolbar: the minimap and the flame chart, colored per frame.
            drawn(shot, "speedscope's flame chart", top=30)
    return f"ok: speedscope {SPEEDSCOPE_VERSION} shows {name!r} ({len(profile['profiles'])} profiles, {len(profile['shared']['frames'])} frames)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--screenshot", help="keep the screenshot here (PNG)")
    ap.add_argument("--cache", help=f"where speedscope is installed (default $BB_SPEEDSCOPE_DIR or {DEFAULT_CACHE})")
    args = ap.parse_args()
    try:
        print(check(args.file, args.screenshot, args.cache))
    except Failed as e:
        print(f"check_speedscope: {args.file}: {e}")
        sys.exit(1)
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError) as e:
        print(f"check_speedscope: {args.file}: {type(e).__name__}: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
