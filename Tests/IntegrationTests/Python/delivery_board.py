"""An at-least-once board for the tests, written from docs/PROTOCOL.md (5.3, header field 7):
it appends each activation it is handed, with its delivery count, to LOG; it holds one whose
payload is "hold" (without answering) on its first delivery, keeps one whose payload is "keep"
unanswered on its first delivery (and goes on serving), takes one whose payload is "long"
(`delivery.taken`) and works 4 s on it, dies at once on one whose payload is "poison"
while the file POISON exists, fails one whose payload is "flaky" on its first two deliveries
(error `handlerFailed`, transient) and gives up one whose payload is "refuse" (error `rejected`);
it answers everything else.

usage: delivery_board.py LOG POISON"""
import os
import struct
import sys
import time

import json

from echo_board import ERROR, REPLY, send, serve

ACTIVATE, CONTROL, DELIVERY_COUNT = 4, 9, 7
log, poison = sys.argv[1:3]


def handle(message, payload):
    field = message["optional"].get(DELIVERY_COUNT)
    count = struct.unpack(">I", field)[0] if field else 0
    with open(log, "a") as out:
        out.write(f"{payload.decode()} {count}\n")
    if payload == b'"hold"' and count == 1:
        time.sleep(120)  # the test kills it here
    if payload == b'"keep"' and count == 1:
        return None
    if payload == b'"long"':
        # Taken first, then longer than the liveness timeout (the broker's answer is not read).
        send(CONTROL, "delivery.taken", json.dumps({"id": message["corr"]}).encode())
        time.sleep(4)
    if payload == b'"poison"' and os.path.exists(poison):
        os._exit(3)
    if payload == b'"flaky"' and count < 3:
        return ERROR, "handlerFailed", (), json.dumps({"code": "handlerFailed", "message": "the store's owner is down"}).encode()
    if payload == b'"refuse"':
        return ERROR, "rejected", (), json.dumps({"code": "rejected", "message": "no such job"}).encode()
    return REPLY, "", (), b'{"done":true}'


serve([], handle, kinds=(ACTIVATE,))
