#!/usr/bin/env python3
"""An MDP client that sends N small requests for 512 KiB answers (`big 524288` to an MDP worker,
scripts/mdp/worker.py, serving SERVICE) and reads none of them (RFC 18 framing, a DEALER with
RCVHWM 1), then reads them all. Samples the broker's resident memory meanwhile and prints one
JSON line: {"before", "peak" (MiB), "answers", "busy", "served"} (`served`: another client was
answered while this one did not read).

usage: mdp_never_reads.py ENDPOINT BROKER_PID N SERVICE
"""
import json
import sys
import time

import zmq

endpoint, broker, count, service = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].encode()


def resident_mib():
    with open("/proc/%d/status" % broker) as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


context = zmq.Context()
socket = context.socket(zmq.DEALER)
socket.setsockopt(zmq.RCVHWM, 1)
socket.setsockopt(zmq.LINGER, 0)
socket.connect(endpoint)
before = resident_mib()
peak = before
request = [b"MDPC02", b"\x01", service, b"big", b"524288"]
for index in range(count):
    while True:
        try:
            socket.send_multipart(request, zmq.NOBLOCK)
            break
        except zmq.Again:
            time.sleep(0.0005)
    if index % 50 == 0:
        peak = max(peak, resident_mib())

# Meanwhile another client is served; wait until the broker's memory stops growing.
other = context.socket(zmq.DEALER)
other.setsockopt(zmq.LINGER, 0)
other.setsockopt(zmq.RCVTIMEO, 10000)
other.connect(endpoint)
served, last, unchanged = False, -1.0, 0
for _ in range(600):
    if unchanged >= 4:
        break
    time.sleep(0.25)
    now = resident_mib()
    peak = max(peak, now)
    other.send_multipart([b"MDPC02", b"\x01", b"demo.greeter", b"greet", b'{"name":"other"}'])
    try:
        served = served or b"Hello, other!" in other.recv_multipart()[-1]
    except zmq.Again:
        pass
    unchanged = unchanged + 1 if abs(now - last) < 1 else 0
    last = now

answers, busy = 0, 0
socket.setsockopt(zmq.RCVTIMEO, 10000)
while answers < count:
    try:
        reply = socket.recv_multipart()
    except zmq.Again:
        break
    answers += 1
    if reply[3] == b"error" and b'"busy"' in reply[4]:
        busy += 1
print(json.dumps({"before": before, "peak": peak, "answers": answers, "busy": busy, "served": served}))
