#!/usr/bin/env python3
"""A bounded AMQP load on a local RabbitMQ: one publisher and one consumer (python3-pika) on a
durable-less queue, for SECONDS; prints `ready` once both are connected, then one line
`done SENT RECEIVED RATE` (messages per second received)."""
import sys, threading, time
import pika

def main():
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 512
    params = pika.ConnectionParameters(host="127.0.0.1", port=port, heartbeat=0)
    queue = "bb_load"
    pub = pika.BlockingConnection(params)
    pch = pub.channel()
    pch.queue_declare(queue=queue, auto_delete=True)
    received = [0]
    stop = threading.Event()

    def consume():
        con = pika.BlockingConnection(params)
        ch = con.channel()
        ch.basic_qos(prefetch_count=200)
        def on_msg(ch, method, props, body):
            received[0] += 1
            if received[0] % 50 == 0:
                ch.basic_ack(method.delivery_tag, multiple=True)
        ch.basic_consume(queue=queue, on_message_callback=on_msg)
        while not stop.is_set():
            con.process_data_events(time_limit=0.1)
        con.close()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    print("ready", flush=True)
    body = b"x" * size
    sent = 0
    start = time.monotonic()
    end = start + seconds
    report, last = start + 5, 0
    while time.monotonic() < end:
        if time.monotonic() >= report:
            print("rate %.1f" % ((received[0] - last) / 5), flush=True)
            report, last = report + 5, received[0]
        for _ in range(100):
            pch.basic_publish(exchange="", routing_key=queue, body=body)
        sent += 100
        # Keep the queue short: the consumer sets the pace (a bounded load, not a flood).
        while sent - received[0] > 2000 and time.monotonic() < end:
            pub.process_data_events(time_limit=0.01)
    elapsed = time.monotonic() - start
    stop.set()
    t.join(5)
    pub.close()
    print("done %d %d %.1f" % (sent, received[0], received[0] / elapsed), flush=True)

main()
