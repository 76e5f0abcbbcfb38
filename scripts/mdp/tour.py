#!/usr/bin/env python3
"""A program that knows only Majordomo (majortomo 0.2.0), nothing of BoardBus's own protocol:
it serves a board, `py.tour` (an MDP worker), and calls every command of every running board of
the fleet (found with `mmi.boards`), its own included, with a payload made from the command's
JSON Schema (`mmi.introspect`), printing one line per call:
`<service> <command> ok` or `<service> <command> error <code>`.

usage: tour.py ENDPOINT      (the motherboard's --mdp endpoint)
"""
import json
import sys
import threading
import time

from majortomo import Client, Worker

endpoint = sys.argv[1]


def example(schema, defs=None):
    """The smallest value a JSON Schema (as BoardBus's introspection gives it) accepts."""
    defs = schema.get("$defs", defs or {})
    if "$ref" in schema:
        return example(defs.get(schema["$ref"].split("/")[-1], {}), defs)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return {name: example(schema["properties"][name], defs) for name in schema.get("required", [])}
    return {"string": "tour", "integer": 1, "number": 1.5, "boolean": True, "array": []}.get(kind, {})


def serve():
    worker = Worker(endpoint, b"py.tour")
    worker.connect()
    while True:
        client, frames = worker.wait_for_request()
        worker.send_reply_final(client, [json.dumps({"toured": frames[0].decode()}).encode()])


threading.Thread(target=serve, daemon=True).start()

with Client(endpoint) as client:
    def call(service, *frames):
        client.send(service.encode(), *[frame.encode() for frame in frames])
        return client.recv_all_as_list(timeout=20)

    while call("mmi.service", "py.tour") != [b"200"]:
        time.sleep(0.05)
    boards = json.loads(call("mmi.boards")[1])["boards"]
    for board in boards:
        service = board["id"] if not board["scope"] else board["scope"] + "/" + board["id"]
        introspection = call("mmi.introspect", service)
        schemas = json.loads(introspection[1]).get("schemas") or {} if introspection[0] == b"200" else {}
        # An MDP worker declares no commands: ask ours for one.
        for command in board["commands"] or (["hello"] if board["id"] == "py.tour" else []):
            request = schemas.get("commands", {}).get(command, {}).get("request", {})
            reply = call(service, command, json.dumps(example(request)))
            outcome = "error " + json.loads(reply[1])["code"] if reply[0] == b"error" else "ok"
            print(service, command, outcome, flush=True)
