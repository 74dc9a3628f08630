#!/usr/bin/env python3
"""A store that misbehaves on purpose, for the tests of beam-bpf-agent's pushes
(tests/integration/agent_push_test.cpp). It takes any POST (Pyroscope's /ingest, OTLP's path),
reads its body, logs it, then answers as told:

  --status N              every request (default 200)
  --fail-name TEXT=N      the requests whose query parameter "name" holds TEXT: N
  --hang                  never answers (the connection stays open until the store is killed)
  --reset-after-answer    a 200 with half its body, then the connection reset (TCP RST)
  --cert F --key F        TLS with that certificate; --client-ca F: and a client certificate
                          signed by that CA required (mutual TLS)

Each request is a line of JSON in --log before it is answered: its path, its query parameter
"name", the status it gets, and its Authorization and X-Api-Key headers (the test checks they
were sent and never said in the agent's lines).

  faulty_store.py --log FILE [--port N] [--port-file FILE] [options above]
"""
import argparse
import http.server
import json
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse

import receiving


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def do_POST(self):
        a = self.server.args
        body = self.rfile.read(int(self.headers.get('Content-Length', '0')))
        url = urllib.parse.urlsplit(self.path)
        name = urllib.parse.parse_qs(url.query).get('name', [''])[0]
        status = a.status
        for rule in a.fail_name:
            text, _, code = rule.rpartition('=')
            if text in name:
                status = int(code)
        with self.server.lock:
            with open(a.log, 'a') as f:
                f.write(json.dumps({'path': url.path, 'name': name, 'status': status, 'bytes': len(body),
                                    'authorization': self.headers.get('Authorization'),
                                    'x_api_key': self.headers.get('X-Api-Key')}) + '\n')
        if a.hang:
            time.sleep(3600)
        if a.reset_after_answer:
            self.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n' + b'\0' * 10)
            self.wfile.flush()
            time.sleep(0.2)  # the client has read the status: the reset cuts the body only
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        self.send_response(status)
        self.send_header('Content-Length', '0')
        self.end_headers()

    def log_message(self, fmt, *args):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--log', required=True)
    ap.add_argument('--port', type=int, default=0)
    ap.add_argument('--port-file')
    ap.add_argument('--status', type=int, default=200)
    ap.add_argument('--fail-name', action='append', default=[])
    ap.add_argument('--hang', action='store_true')
    ap.add_argument('--reset-after-answer', action='store_true')
    ap.add_argument('--cert')
    ap.add_argument('--key')
    ap.add_argument('--client-ca')
    a = ap.parse_args()
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    http.server.ThreadingHTTPServer.daemon_threads = True
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', a.port), Handler)
    srv.args = a
    srv.lock = threading.Lock()
    if a.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.cert, a.key)
        if a.client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(a.client_ca)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    receiving.serve(srv, a.port_file)


if __name__ == '__main__':
    sys.exit(main())
