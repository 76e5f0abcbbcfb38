"""A BoardBus board written from docs/PROTOCOL.md with pyzmq and cbor2 (an independent CBOR
implementation): it answers the command `describe` in the content type it was asked in (header
field 3), with what it decoded: the value itself (re-encoded by cbor2 in its canonical form, so
floats come back in their shortest width), the kind of each field and the length in characters
of each text field. Registers as $BOARDBUS_BOARD_ID; exits on SIGTERM."""
import json
import math
import os
import signal
import sys

import cbor2
import zmq

from echo_board import COMMAND, ERROR, HEARTBEAT, REGISTER, REPLY, REPLY_EXPECTED, UNREGISTER, decode_header, encode_header

CONTENT_TYPE = 3
CBOR = b"application/cbor"


def kind(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return "-0" if value == 0 and math.copysign(1, value) < 0 else "float"
    return {str: "str", bytes: "bytes", list: "list", dict: "dict", type(None): "null"}[type(value)]


def describe(value):
    return {"echo": value, "kinds": {key: kind(item) for key, item in value.items()},
            "characters": {key: len(item) for key, item in value.items() if isinstance(item, str)}}


def main():
    board_id = os.environ.get("BOARDBUS_BOARD_ID", "py.cbor")
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(os.environ["BOARDBUS_ADDRESS"])
    registration = {"id": board_id, "pid": os.getpid(), "scope": "", "commands": ["describe"], "actions": []}
    sock.send_multipart([encode_header(REGISTER, corr=1, flags=REPLY_EXPECTED, timeout_ms=5000, source=board_id),
                         json.dumps(registration).encode()])
    if not sock.poll(10_000):
        sys.exit("no answer to register")
    header, payload = sock.recv_multipart()
    if decode_header(header)["kind"] != REPLY:
        sys.exit("registration refused: " + payload.decode())
    interval = json.loads(payload)["heartbeatIntervalMilliseconds"]
    print("READY", board_id, flush=True)
    while running[0]:
        if sock.poll(interval):
            header, payload = sock.recv_multipart()
            message = decode_header(header)
            if message["kind"] == COMMAND and message["flags"] & REPLY_EXPECTED:
                content_type = message["optional"].get(CONTENT_TYPE)
                try:
                    if content_type == CBOR:
                        answer = cbor2.dumps(describe(cbor2.loads(payload)), canonical=True)
                        optional = [(CONTENT_TYPE, CBOR)]
                    else:
                        answer = json.dumps(describe(json.loads(payload))).encode()
                        optional = []
                    sock.send_multipart([encode_header(REPLY, corr=message["corr"], source=board_id, optional=optional), answer])
                except Exception as error:  # a payload it cannot read: a typed error, as a board must
                    body = {"code": "typeMismatch", "message": "py board: %s" % error}
                    sock.send_multipart([encode_header(ERROR, corr=message["corr"], source=board_id, type_name="typeMismatch"),
                                         json.dumps(body).encode()])
        sock.send_multipart([encode_header(HEARTBEAT, source=board_id), b""])
    sock.send_multipart([encode_header(UNREGISTER, source=board_id), b""])
    sock.close()
    zmq.Context.instance().term()


if __name__ == "__main__":
    main()
