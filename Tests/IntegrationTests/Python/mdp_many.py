#!/usr/bin/env python3
"""COUNT MDP workers, each READY for a service of its own (RFC 18 framing, raw pyzmq DEALERs),
heartbeating every 2 s until the file STOP exists (at most 300 s, and no longer than its directory
or its parent); then prints how many were answered DISCONNECT (the others are served) and leaves.

usage: mdp_many.py ENDPOINT COUNT STOP
"""
import os
import resource
import sys
import time

import zmq

endpoint, count, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
context = zmq.Context()
context.set(zmq.MAX_SOCKETS, count + 64)
poller = zmq.Poller()
workers = []
for index in range(count):
    worker = context.socket(zmq.DEALER)
    worker.setsockopt(zmq.LINGER, 0)
    worker.connect(endpoint)
    worker.send_multipart([b"MDPW02", b"\x01", b"many.s%d" % index])
    poller.register(worker, zmq.POLLIN)
    workers.append(worker)
print("ready", count, flush=True)
told = set()
deadline = time.monotonic() + 300
beat = time.monotonic()
parent = os.getppid()
# Also gone when the test's directory is (its fleet ended, failed or not) or the test is.
while time.monotonic() < deadline and not os.path.exists(stop) and os.path.isdir(os.path.dirname(stop)) and os.getppid() == parent:
    if time.monotonic() - beat >= 2:
        beat = time.monotonic()
        for worker in workers:
            worker.send_multipart([b"MDPW02", b"\x05"])
    for socket, _ in poller.poll(200):
        frames = socket.recv_multipart()
        if frames[:2] == [b"MDPW02", b"\x06"]:
            told.add(id(socket))
print("disconnected", len(told), flush=True)
for worker in workers:
    worker.close()
