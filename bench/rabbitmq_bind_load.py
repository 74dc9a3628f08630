#!/usr/bin/python3
"""The load of the README's "Where processes wait" example (beam-bpf-sample -e wall on RabbitMQ):
a RabbitMQ load of many channels each making synchronous binding calls (python3-pika, one
asynchronous SelectConnection per connection, all in one thread): CONNS connections x CHANS
channels; each channel declares its own durable queue bb_bind_C_K, then loops for SECONDS:
queue_bind(queue, amq.topic, key) -> wait for Bind-Ok -> queue_unbind -> wait for Unbind-Ok.
Every bind/unbind of a durable queue to a durable exchange is a disc mnesia transaction in the
server (rabbit_channel -> worker_pool -> mnesia, then mnesia_sync). Queues are deleted at the end.
Usage: /usr/bin/python3 bench/rabbitmq_bind_load.py PORT SECONDS [CONNS=10] [CHANS=20] (Debian's python3-pika)
Prints `ready`, `rate N` (bind+unbind pairs per second) every 5 s, then `done PAIRS`."""
import sys, time, functools
import pika
from pika.adapters.select_connection import SelectConnection

def main():
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    nconn = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    nchan = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    params = pika.ConnectionParameters(host="127.0.0.1", port=port, heartbeat=0)
    pairs = [0]
    state = {"ready": 0, "stopping": False, "closed": 0}
    end = [None]
    conns = []

    def chan_loop(ch, q, i):
        if state["stopping"]:
            ch.queue_delete(queue=q, callback=lambda _f: ch.close())
            return
        key = "k.%s.%d" % (q, i % 8)
        def unbound(_f):
            pairs[0] += 1
            chan_loop(ch, q, i + 1)
        def bound(_f):
            ch.queue_unbind(queue=q, exchange="amq.topic", routing_key=key, callback=unbound)
        ch.queue_bind(queue=q, exchange="amq.topic", routing_key=key, callback=bound)

    def on_channel(c, k, ch):
        q = "bb_bind_%d_%d" % (c, k)
        def declared(_f):
            state["ready"] += 1
            if state["ready"] == nconn * nchan:
                print("ready", flush=True)
            chan_loop(ch, q, 0)
        ch.queue_declare(queue=q, durable=True, callback=declared)

    def on_open(c, conn):
        for k in range(nchan):
            conn.channel(on_open_callback=functools.partial(on_channel, c, k))

    ioloop = None
    for c in range(nconn):
        conn = SelectConnection(params, on_open_callback=functools.partial(on_open, c),
                                custom_ioloop=ioloop)
        ioloop = conn.ioloop
        conns.append(conn)

    start = time.monotonic()
    end[0] = start + seconds
    last = [0]

    def tick():
        now = time.monotonic()
        print("rate %.1f" % ((pairs[0] - last[0]) / 5), flush=True)
        last[0] = pairs[0]
        if now >= end[0]:
            state["stopping"] = True
            ioloop.call_later(3, finish)
        else:
            ioloop.call_later(5, tick)

    def finish():
        for conn in conns:
            if conn.is_open:
                conn.close()
        ioloop.call_later(1, ioloop.stop)

    ioloop.call_later(5, tick)
    ioloop.start()
    print("done %d" % pairs[0], flush=True)

main()
