#!/usr/bin/env python3
"""A tcp client with CURVE that goes through its handshake and then says nothing until told:
prints "ready" once the handshake is through, waits for GO_FILE to exist (60 s at most), sends one
command, prints the answer as JSON ({"kind": ..., "payload": ...}, or {"kind": null} when none
comes in 10 s), then "closed" if the broker closes the connection within 5 s, else "open".
With `mdp` last, it speaks MDP 0.2 to the broker's MDP endpoint instead (TARGET is the service)
and prints the reply's last frame as the payload. With $CLAIM_CURVE_KEY, it lies: it sends that
key as its own `X-Curve-Key` connection property (ZMTP metadata), which the broker must not take
for the key it authenticated with.

usage: silent_curve_client.py ENDPOINT SERVER_PUBLIC_KEY_FILE CLIENT_KEY_FILE GO_FILE TARGET COMMAND JSON [mdp]
"""
import json
import os
import sys
import time

import zmq
import zmq.auth
from zmq.utils.monitor import recv_monitor_message

from echo_board import COMMAND, REPLY_EXPECTED, decode_header, encode_header


def wait_event(monitor, event, timeout_ms):
    """Whether `event` comes on the monitor socket within `timeout_ms`."""
    deadline = time.monotonic() + timeout_ms / 1000
    while (left := deadline - time.monotonic()) > 0:
        if not monitor.poll(int(left * 1000) + 1):
            return False
        if recv_monitor_message(monitor)["event"] == event:
            return True
    return False


def main():
    endpoint, server_file, client_file, go_file, target, command, value = sys.argv[1:8]
    mdp = sys.argv[8:9] == ["mdp"]
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.curve_serverkey, _ = zmq.auth.load_certificate(server_file)
    sock.curve_publickey, sock.curve_secretkey = zmq.auth.load_certificate(client_file)
    if "CLAIM_CURVE_KEY" in os.environ:
        sock.setsockopt(zmq.METADATA, b"X-Curve-Key:" + os.environ["CLAIM_CURVE_KEY"].encode())
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
    sock.connect(endpoint)
    if not wait_event(monitor, zmq.EVENT_HANDSHAKE_SUCCEEDED, 10_000):
        sys.exit("no handshake in 10 s")
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(go_file):
        if time.monotonic() > deadline:
            sys.exit("not told to go in 60 s")
        time.sleep(0.05)
    if mdp:
        sock.send_multipart([b"MDPC02", b"\x01", target.encode(), command.encode(), value.encode()])
    else:
        header = encode_header(COMMAND, corr=7, flags=REPLY_EXPECTED, timeout_ms=5_000, target=target, type_name=command)
        sock.send_multipart([header, value.encode()])
    if sock.poll(10_000):
        frames = sock.recv_multipart()
        kind = "mdp" if mdp else decode_header(frames[0])["kind"]
        print(json.dumps({"kind": kind, "payload": frames[-1].decode(errors="replace")}), flush=True)
    else:
        print(json.dumps({"kind": None}), flush=True)
    print("closed" if wait_event(monitor, zmq.EVENT_DISCONNECTED, 5_000) else "open", flush=True)


if __name__ == "__main__":
    main()
