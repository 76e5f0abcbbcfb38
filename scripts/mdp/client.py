#!/usr/bin/env python3
"""An MDP 0.2 client written with majortomo: sends one request and prints the reply's frames as
a JSON list of strings (each frame decoded as UTF-8; a frame longer than 64 KiB is printed
as its length, "<N bytes>").

usage: client.py ENDPOINT SERVICE [FRAME...]   (timeout 20 s)
"""
import json
import sys

from majortomo import Client


def main():
    endpoint, service, frames = sys.argv[1], sys.argv[2], [f.encode() for f in sys.argv[3:]]
    with Client(endpoint) as client:
        client.send(service.encode(), *frames)
        reply = client.recv_all_as_list(timeout=20)
    print(json.dumps([f.decode() if len(f) <= 65536 else "<%d bytes>" % len(f) for f in reply]))


if __name__ == "__main__":
    main()
