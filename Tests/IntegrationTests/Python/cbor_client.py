"""A BoardBus client written from docs/PROTOCOL.md with pyzmq and cbor2: sends one command with
a CBOR payload (header field 3 `application/cbor`) and prints the reply as JSON:
{"kind": ..., "contentType": ..., "reply": <the payload, decoded as its content type says>}.
Usage: cbor_client.py ENDPOINT TARGET COMMAND JSON-OF-THE-VALUE"""
import json
import sys

import cbor2
import zmq

from echo_board import COMMAND, REPLY_EXPECTED, decode_header, encode_header


def main():
    endpoint, target, command, value = sys.argv[1:5]
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    header = encode_header(COMMAND, corr=7, flags=REPLY_EXPECTED, timeout_ms=10_000, target=target, type_name=command,
                           optional=[(3, b"application/cbor")])
    sock.send_multipart([header, cbor2.dumps(json.loads(value))])
    if not sock.poll(15_000):
        sys.exit("no reply")
    header, payload = sock.recv_multipart()
    reply = decode_header(header)
    content_type = reply["optional"].get(3, b"").decode() or None
    decoded = cbor2.loads(payload) if content_type == "application/cbor" else json.loads(payload)
    print(json.dumps({"kind": reply["kind"], "corr": reply["corr"], "contentType": content_type, "reply": decoded}))


if __name__ == "__main__":
    main()
