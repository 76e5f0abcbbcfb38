"""A BoardBus board written from docs/PROTOCOL.md with pyzmq and cbor2 (an independent CBOR
implementation): it answers the command `describe` in the content type it was asked in (header
field 3), with what it decoded: the value itself (re-encoded by cbor2 in its canonical form, so
floats come back in their shortest width), the kind of each field and the length in characters
of each text field. Registers as $BOARDBUS_BOARD_ID; exits on SIGTERM."""
import json
import math

import cbor2

from echo_board import REPLY, error, serve

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


def answer(message, payload):
    content_type = message["optional"].get(CONTENT_TYPE)
    try:
        if content_type == CBOR:
            return REPLY, "", [(CONTENT_TYPE, CBOR)], cbor2.dumps(describe(cbor2.loads(payload)), canonical=True)
        return REPLY, "", [], json.dumps(describe(json.loads(payload))).encode()
    except Exception as failure:  # a payload it cannot read: a typed error, as a board must
        return error("typeMismatch", "py board: %s" % failure)


if __name__ == "__main__":
    serve(["describe"], answer)
