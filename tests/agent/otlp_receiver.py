#!/usr/bin/env python3
"""A stand-in for an OTLP/HTTP receiver of the profiles signal, for beam-bpf-agent's tests.

It implements the OTLP/HTTP protocol as opentelemetry-proto's docs/specification.md gives it for
binary Protobuf: POST /v1development/profiles, "Content-Type: application/x-protobuf", an
optional "Content-Encoding: gzip", a request body of at most 64 MiB (else 413), and a response
of the same content type holding an ExportProfilesServiceResponse (empty on full success).
Anything else gets a 400 with the reason. The body is not decoded here: the test decodes it
with protoc.

--answers lists what the first requests get, in order, before every later one gets a 200: a
status code (503: the body is not kept, the client should send it again; with --retry-after
SECONDS, the answer says so in its Retry-After) or "partial" (a 200 whose partial_success
refuses one profile, encoded by `protoc --encode` from --proto-dir: the body is kept, and must
not come again).

Each kept body is saved as OUT/NNNNNN.pb, with OUT/NNNNNN.json (path, headers, answer); every
request that reaches the answer, kept or not, is a line "TIME ANSWER" of OUT/requests.log.

  otlp_receiver.py --out DIR --proto-dir DIR [--port N] [--port-file FILE] [--answers 503,partial]
                   [--retry-after SECONDS]
"""
import argparse
import gzip
import http.server
import os
import subprocess
import sys
import time

import receiving

MAX_BODY = 64 << 20
PATH = '/v1development/profiles'
SERVICE = 'opentelemetry/proto/collector/profiles/v1development/profiles_service.proto'
RESPONSE = 'opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceResponse'


class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self, status, body=b'', ctype='application/x-protobuf', headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def fail(self, status, why):
        self.answer(status, why.encode(), 'text/plain')

    def do_POST(self):
        length = int(self.headers.get('Content-Length', '0'))
        if length > MAX_BODY:
            return self.fail(413, 'request body over 64 MiB')
        body = self.rfile.read(length)
        if self.path != PATH:
            return self.fail(404, f'no endpoint {self.path}')
        ctype = self.headers.get('Content-Type', '')
        if ctype != 'application/x-protobuf':
            return self.fail(415, f'Content-Type {ctype!r}: this receiver takes application/x-protobuf')
        if self.headers.get('Content-Encoding', 'identity') == 'gzip':
            body = gzip.decompress(body)
            if len(body) > MAX_BODY:
                return self.fail(413, 'request body over 64 MiB once decompressed')
        elif self.headers.get('Content-Encoding', 'identity') != 'identity':
            return self.fail(400, f"Content-Encoding {self.headers['Content-Encoding']!r}")
        srv = self.server
        what = srv.answers.pop(0) if srv.answers else '200'
        with open(os.path.join(srv.out, 'requests.log'), 'a') as f:
            f.write(f'{time.monotonic():.3f} {what}\n')
        if what != 'partial' and what != '200':
            after = [('Retry-After', str(srv.retry_after))] if srv.retry_after else []
            return self.answer(int(what), f'scripted answer {what}'.encode(), 'text/plain', after)
        receiving.save(srv.out, '.pb', body, {'path': self.path, 'headers': dict(self.headers.items()), 'answer': what})
        self.answer(200, srv.partial if what == 'partial' else b'')

    def log_message(self, fmt, *args):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--proto-dir', required=True)
    ap.add_argument('--port', type=int, default=0)
    ap.add_argument('--port-file')
    ap.add_argument('--answers', default='')
    ap.add_argument('--retry-after', type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    srv = http.server.HTTPServer(('127.0.0.1', a.port), Handler)
    srv.out = a.out
    srv.answers = [x for x in a.answers.split(',') if x]
    srv.retry_after = a.retry_after
    srv.partial = subprocess.run(
        ['protoc', f'--encode={RESPONSE}', '-I', a.proto_dir, os.path.join(a.proto_dir, SERVICE)],
        input=b'partial_success { rejected_profiles: 1 error_message: "scripted partial success" }',
        capture_output=True, check=True).stdout
    receiving.serve(srv, a.port_file)


if __name__ == '__main__':
    sys.exit(main())
