#!/usr/bin/env python3
"""What an MDP worker cannot make the broker do, with raw pyzmq DEALERs in RFC 18 framing.
1. READY for a service in a scope the fleet does not have, and for an `mmi.` name: DISCONNECT,
   once each (the connection kept open and listened to for 3 s).
2. A worker that takes a request and does not answer while 100 requests of 1 MiB with a 1 s
   deadline queue behind it: those past the byte bound are answered `busy` at once; once the
   deadlines pass and the worker answers, it is handed no request whose caller stopped waiting.
Prints `name value` lines.

usage: mdp_bounds.py MDP_ENDPOINT BUS_ENDPOINT BUSCTL
"""
import json
import subprocess
import sys
import time

import zmq

from echo_board import COMMAND, ERROR, REPLY_EXPECTED, decode_header, encode_header

endpoint, bus, busctl = sys.argv[1], sys.argv[2], sys.argv[3]
context = zmq.Context.instance()


def dealer():
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    return socket


def disconnects(socket, seconds):
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        if socket.poll(100):
            frames = socket.recv_multipart()
            if frames[:2] == [b"MDPW02", b"\x06"]:
                count += 1
    return count


for name, service in (("unknown_scope", b"nosuch/echo"), ("mmi", b"mmi.echo")):
    worker = dealer()
    worker.send_multipart([b"MDPW02", b"\x01", service])
    print(name + "_disconnects", disconnects(worker, 3), flush=True)
    worker.close()

slow = dealer()
slow.send_multipart([b"MDPW02", b"\x01", b"slow.echo"])
# Until the service is a board of the motherboard.
for _ in range(100):
    if subprocess.run([busctl, "status", "slow.echo"], capture_output=True).returncode == 0:
        break
    time.sleep(0.1)

# 100 callers' requests of 1 MiB with 1 s deadlines, on the bus (an MDP client's carry none).
caller = context.socket(zmq.DEALER)
caller.setsockopt(zmq.LINGER, 0)
caller.connect(bus)
payload = b'"' + b"x" * (1 << 20) + b'"'
for index in range(1, 101):
    header = encode_header(COMMAND, corr=index, flags=REPLY_EXPECTED, timeout_ms=1000, target="slow.echo", type_name="echo")
    caller.send_multipart([header, payload])
codes, deadline = {}, time.monotonic() + 10
while sum(codes.values()) < 100 and time.monotonic() < deadline:
    if caller.poll(200):
        header, body = caller.recv_multipart()
        code = json.loads(body)["code"] if decode_header(header)["kind"] == ERROR else "reply"
        codes[code] = codes.get(code, 0) + 1
print("busy", codes.get("busy", 0), flush=True)
print("timeout", codes.get("timeout", 0), flush=True)
print("answered", sum(codes.values()), flush=True)

# The worker reads what it was handed: one request (the first), then answers it.
handed = 0
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    if slow.poll(200):
        frames = slow.recv_multipart()
        if frames[1] == b"\x02":
            handed += 1
            slow.send_multipart([b"MDPW02", b"\x04", frames[2], b"", b'"late"'])
print("handed", handed, flush=True)
slow.send_multipart([b"MDPW02", b"\x06"])
