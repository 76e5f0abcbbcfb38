#!/usr/bin/env python3
"""An MDP 0.2 worker written with majortomo (a third-party implementation), for BoardBus's
tests and benchmark: it serves one service, answering each request's body frames
[command, payload]:

  echo   -> FINAL [payload]
  big    -> FINAL [a JSON string of N bytes] (N = the payload, a number)
  fail   -> FINAL ["error", {"code": "handlerFailed", "message": ...}]
  stream -> PARTIAL [b"part"], then FINAL [payload]
  pid    -> FINAL [this process's pid]

usage: worker.py ENDPOINT SERVICE
"""
import json
import os
import sys

from majortomo import Worker


def answer(command, payload):
    if command == b"big":
        size = int(payload)
        return "final", [json.dumps("x" * (size - 2)).encode()]
    if command == b"fail":
        return "final", [b"error", json.dumps({"code": "handlerFailed", "message": "the worker failed on purpose"}).encode()]
    if command == b"stream":
        return "stream", [payload]
    if command == b"pid":
        return "final", [str(os.getpid()).encode()]
    return "final", [payload]


def main():
    endpoint, service = sys.argv[1], sys.argv[2]
    worker = Worker(endpoint, service.encode())
    worker.connect()
    print("READY", flush=True)
    while True:
        client, frames = worker.wait_for_request()
        command = frames[0] if frames else b""
        payload = frames[1] if len(frames) > 1 else b"{}"
        kind, reply = answer(command, payload)
        if kind == "stream":
            worker.send_reply_partial(client, [b"part"])
        worker.send_reply_final(client, reply)


if __name__ == "__main__":
    main()
