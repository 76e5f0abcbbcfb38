#!/usr/bin/env python3
"""RFC 18 (MDP/0.2) as the specification writes it, with raw pyzmq DEALERs — no delimiter
frame, client REQUEST 0x01 and FINAL 0x03 with the service name — against BoardBus's MDP
endpoint: a worker serves `rfc.echo`, a client calls it and `demo.greeter`. Prints "ok" or why not.

usage: mdp_rfc.py ENDPOINT
"""
import sys

import zmq

endpoint = sys.argv[1]
context = zmq.Context.instance()


def dealer():
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVTIMEO, 10000)
    socket.connect(endpoint)
    return socket


def expect(condition, what):
    if not condition:
        print("not ok:", what)
        sys.exit(1)


worker = dealer()
worker.send_multipart([b"MDPW02", b"\x01", b"rfc.echo"])  # READY

client = dealer()
# A board of the fleet, RFC 18 framing.
client.send_multipart([b"MDPC02", b"\x01", b"demo.greeter", b"greet", b'{"name":"RFC"}'])
reply = client.recv_multipart()
expect(reply == [b"MDPC02", b"\x03", b"demo.greeter", b'{"message":"Hello, RFC!"}'], "greeter reply %r" % reply)

# The RFC worker serves a request of the RFC client (retried until the service is a board).
for attempt in range(50):
    client.send_multipart([b"MDPC02", b"\x01", b"rfc.echo", b"echo", b'{"n":1}'])
    poller = zmq.Poller()
    poller.register(worker, zmq.POLLIN)
    poller.register(client, zmq.POLLIN)
    events = dict(poller.poll(10000))
    if worker in events:
        request = worker.recv_multipart()
        if request[1] == b"\x05":  # a HEARTBEAT first
            request = worker.recv_multipart()
        expect(request[:2] == [b"MDPW02", b"\x02"] and request[3] == b"" and request[4:] == [b"echo", b'{"n":1}'], "request %r" % request)
        worker.send_multipart([b"MDPW02", b"\x04", request[2], b"", b'{"n":2}'])  # FINAL
        reply = client.recv_multipart()
        expect(reply == [b"MDPC02", b"\x03", b"rfc.echo", b'{"n":2}'], "echo reply %r" % reply)
        break
    reply = client.recv_multipart()  # not a board yet: noSuchBoard, try again
    expect(reply[:3] == [b"MDPC02", b"\x03", b"rfc.echo"] and reply[3] == b"error", "early reply %r" % reply)
else:
    expect(False, "the worker never got a request")

worker.send_multipart([b"MDPW02", b"\x06"])  # DISCONNECT
print("ok")
