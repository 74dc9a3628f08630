#!/usr/bin/env python3
"""A bounded XMPP load on a local ejabberd (plain TCP, SASL PLAIN, standard library only):
PAIRS pairs of users (bbuser1..bbuserN, password "bbpass", registered beforehand) log in and
each sender sends chat messages to its receiver for SECONDS, at most WINDOW unanswered at a
time (the receiver answers each one). Prints `ready` once all are logged in, `rate N` (messages
per second received) every 5 s, then `done SENT RECEIVED RATE`."""
import base64, socket, sys, threading, time

HOST = "localhost"

def recv_until(s, marker, buf):
    while marker not in buf[0]:
        data = s.recv(65536)
        if not data:
            raise RuntimeError("connection closed waiting for %r: %r" % (marker, buf[0][-300:]))
        buf[0] += data
    head, _, rest = buf[0].partition(marker)
    buf[0] = rest
    return head

def login(port, user):
    s = socket.create_connection(("127.0.0.1", port))
    buf = [b""]
    opening = ("<?xml version='1.0'?><stream:stream to='%s' xmlns='jabber:client' "
               "xmlns:stream='http://etherx.jabber.org/streams' version='1.0'>" % HOST).encode()
    s.sendall(opening)
    recv_until(s, b"</stream:features>", buf)
    token = base64.b64encode(b"\0" + user.encode() + b"\0bbpass").decode()
    s.sendall(("<auth xmlns='urn:ietf:params:xml:ns:xmpp-sasl' mechanism='PLAIN'>%s</auth>" % token).encode())
    recv_until(s, b"<success", buf)
    s.sendall(opening)
    recv_until(s, b"</stream:features>", buf)
    s.sendall(b"<iq type='set' id='b'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'><resource>r</resource></bind></iq>")
    recv_until(s, b"</iq>", buf)
    s.sendall(b"<presence/>")
    return s, buf

def main():
    port, seconds, pairs = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    window = 20
    conns = [login(port, "bbuser%d" % i) for i in range(1, 2 * pairs + 1)]
    sent, received = [0] * pairs, [0] * pairs
    end = [0.0]
    def receiver(k):
        s, buf = conns[2 * k + 1]
        me = "bbuser%d@%s/r" % (2 * k + 2, HOST)
        while True:
            try:
                data = s.recv(65536)
            except OSError:
                return
            if not data:
                return
            n = data.count(b"<body>")
            received[k] += n
            # An answer to each message keeps both sessions busy (and the sender paced).
            s.sendall(b"".join(b"<message to='bbuser%d@%s/r' type='chat'><body>ack</body></message>"
                               % (2 * k + 1, HOST.encode()) for _ in range(n)))
    def sender(k):
        s, buf = conns[2 * k]
        to = ("bbuser%d@%s/r" % (2 * k + 2, HOST)).encode()
        acked = 0
        body = b"<message to='%s' type='chat'><body>%s</body></message>" % (to, b"x" * 200)
        while time.monotonic() < end[0]:
            while sent[k] - acked < window:
                s.sendall(body)
                sent[k] += 1
            data = s.recv(65536)
            if not data:
                return
            acked += data.count(b"<body>ack</body>")
    print("ready", flush=True)
    start = time.monotonic()
    end[0] = start + seconds
    threads = [threading.Thread(target=receiver, args=(k,), daemon=True) for k in range(pairs)]
    threads += [threading.Thread(target=sender, args=(k,), daemon=True) for k in range(pairs)]
    for t in threads: t.start()
    last = 0
    while any(t.is_alive() for t in threads[pairs:]):
        time.sleep(5)
        now = sum(received)
        print("rate %.1f" % ((now - last) / 5), flush=True)
        last = now
    for t in threads[pairs:]: t.join()
    time.sleep(0.5)
    elapsed = time.monotonic() - start
    for s, _ in conns: s.close()
    print("done %d %d %.1f" % (sum(sent), sum(received), sum(received) / elapsed), flush=True)

main()
