#!/usr/bin/env python3
"""A stand-in for Grafana Pyroscope's ingest endpoint, for beam-bpf-agent's tests.

It implements the documented form of a pprof push (Pyroscope's "Server HTTP API", Ingestion,
pprof format): POST /ingest with the query parameters name (required: APP{k=v,...}), from and
until (required: UNIX seconds), format=pprof, and a multipart/form-data body whose file field
"profile" holds the pprof (and, optionally, "sample_type_config" a JSON object). Anything else
gets a 400 with the reason, as a test failure should.

Each accepted push is saved as OUT/NNNNNN.pb.gz (the profile field's bytes) and OUT/NNNNNN.json
(the query parameters and the sample type config), NNNNNN counting from where the directory
left off, so a receiver restarted on the same directory continues the numbering.

  pyroscope_receiver.py --out DIR [--port N] [--port-file FILE]
"""
import argparse
import email.parser
import email.policy
import http.server
import json
import os
import re
import sys
import urllib.parse

import receiving

NAME = re.compile(r'^[^{}]+\{([^{}]*)\}$')


def parse_name(name):
    """APP{k=v,...} -> (APP, {k: v}); ValueError when it is not that."""
    m = NAME.match(name)
    if not m:
        raise ValueError(f'name {name!r} is not APP{{labels}}')
    labels = {}
    if m.group(1):
        for kv in m.group(1).split(','):
            k, sep, v = kv.partition('=')
            if not sep or not re.fullmatch(r'[A-Za-z0-9_.]+', k):
                raise ValueError(f'label {kv!r} of {name!r} is not key=value')
            labels[k] = v
    return name[:name.index('{')], labels


class Handler(http.server.BaseHTTPRequestHandler):
    def fail(self, why):
        body = why.encode()
        self.send_response(400)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get('Content-Length', '0'))
        body = self.rfile.read(length)
        if url.path != '/ingest':
            return self.fail(f'no endpoint {url.path}')
        q = urllib.parse.parse_qs(url.query, strict_parsing=True)
        q = {k: v[0] for k, v in q.items()}
        for required in ('name', 'from', 'until'):
            if required not in q:
                return self.fail(f'missing {required}')
        try:
            app, labels = parse_name(q['name'])
            start, until = int(q['from']), int(q['until'])
        except ValueError as e:
            return self.fail(str(e))
        if until < start:
            return self.fail('until before from')
        if q.get('format') != 'pprof':
            return self.fail(f"format {q.get('format')!r}: this receiver takes pprof")
        ctype = self.headers.get('Content-Type', '')
        if not ctype.startswith('multipart/form-data'):
            return self.fail(f'Content-Type {ctype!r}: a pprof push with a sample type config is multipart/form-data')
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b'Content-Type: ' + ctype.encode() + b'\r\n\r\n' + body)
        fields = {}
        for part in msg.iter_parts():
            fields[part.get_param('name', header='content-disposition')] = part.get_payload(decode=True)
        if 'profile' not in fields:
            return self.fail('no form field "profile"')
        if not fields['profile'].startswith(b'\x1f\x8b'):
            return self.fail('the profile is not gzip-compressed')
        config = None
        if 'sample_type_config' in fields:
            try:
                config = json.loads(fields['sample_type_config'])
            except ValueError as e:
                return self.fail(f'sample_type_config: {e}')
        receiving.save(self.server.out, '.pb.gz', fields['profile'],
                       {'app': app, 'labels': labels, 'from': start, 'until': until, 'query': q,
                        'sample_type_config': config, 'authorization': self.headers.get('Authorization')})
        self.send_response(200)
        self.send_header('Content-Length', '0')
        self.end_headers()

    def log_message(self, fmt, *args):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--port', type=int, default=0)
    ap.add_argument('--port-file')
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    http.server.HTTPServer.allow_reuse_address = True
    srv = http.server.HTTPServer(('127.0.0.1', a.port), Handler)
    srv.out = a.out
    receiving.serve(srv, a.port_file)


if __name__ == '__main__':
    sys.exit(main())
