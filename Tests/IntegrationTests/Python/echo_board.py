"""A BoardBus board written from docs/PROTOCOL.md alone, with pyzmq: it registers as
$BOARDBUS_BOARD_ID, answers the command `echo` with its payload, heartbeats, and exits on SIGTERM.
Its header codec and loop (`serve`) are shared by the other Python peers of the tests. It speaks
protocol version 3 (a message is two frames, the header and the payload), which the broker still
accepts for one release: the tests keep version-3 peers working with it (PROTOCOL §3)."""
import json
import os
import signal
import struct
import sys
import time

import zmq

REGISTER, UNREGISTER, HEARTBEAT, COMMAND, REPLY, ERROR = 1, 2, 3, 5, 16, 17
REPLY_EXPECTED = 1


def encode_header(kind, corr=0, flags=0, timeout_ms=0, source="", target="", scope="", type_name="", optional=()):
    out = struct.pack(">2sBBHQI", b"BB", 3, kind, flags, corr, timeout_ms)
    for text in (source, target, scope, type_name):
        raw = text.encode()
        out += struct.pack(">H", len(raw)) + raw
    for tag, value in optional:
        out += struct.pack(">BH", tag, len(value)) + value
    return out


def decode_header(buf):
    magic, version, kind, flags, corr, timeout_ms = struct.unpack_from(">2sBBHQI", buf, 0)
    if magic != b"BB" or version != 3:
        raise ValueError("not a BoardBus version-3 header")
    off, fields = 18, []
    for _ in range(4):
        (n,) = struct.unpack_from(">H", buf, off)
        fields.append(buf[off + 2: off + 2 + n].decode())
        off += 2 + n
    optional = {}
    while off < len(buf):
        tag, n = struct.unpack_from(">BH", buf, off)
        optional[tag] = buf[off + 3: off + 3 + n]
        off += 3 + n
    return dict(kind=kind, flags=flags, corr=corr, timeout_ms=timeout_ms,
                source=fields[0], target=fields[1], scope=fields[2], type_name=fields[3], optional=optional)


def serve(commands, answer, kinds=(COMMAND,)):
    """Registers as $BOARDBUS_BOARD_ID with `commands`, prints READY, heartbeats every interval the
    broker asked for, registers again when the broker says `notRegistered` (it restarted), and
    answers each command (each message of `kinds`) that waits for an answer with `answer(message, payload)`: a (kind,
    type_name, optional fields, payload) tuple. Unregisters and returns on SIGTERM."""
    board_id = os.environ.get("BOARDBUS_BOARD_ID", "py.board")
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(os.environ["BOARDBUS_ADDRESS"])
    BOARD[:] = [sock, board_id]
    registration = {"id": board_id, "pid": os.getpid(), "scope": "", "commands": commands, "actions": []}
    if "BOARDBUS_BOARD_SECRET" in os.environ:
        registration["secret"] = os.environ["BOARDBUS_BOARD_SECRET"]

    def register(corr):
        sock.send_multipart([encode_header(REGISTER, corr=corr, flags=REPLY_EXPECTED, timeout_ms=5000, source=board_id),
                             json.dumps(registration).encode()])

    register(1)
    if not sock.poll(10_000):
        sys.exit("no answer to register")
    header, payload = sock.recv_multipart()
    answer_header = decode_header(header)
    if answer_header["kind"] != REPLY or answer_header["corr"] != 1:
        sys.exit("registration refused: " + payload.decode())
    interval = json.loads(payload)["heartbeatIntervalMilliseconds"] / 1000
    print("READY", board_id, flush=True)
    next_heartbeat = time.monotonic() + interval
    while running[0]:
        if sock.poll(max(0, int((next_heartbeat - time.monotonic()) * 1000)) + 1):
            header, payload = sock.recv_multipart()
            message = decode_header(header)
            if message["kind"] in kinds and message["flags"] & REPLY_EXPECTED:
                answered = answer(message, payload)
                if answered is not None:  # None: the board keeps it unanswered
                    kind, type_name, optional, body = answered
                    sock.send_multipart([encode_header(kind, corr=message["corr"], source=board_id, type_name=type_name,
                                                       optional=optional), body])
            elif message["kind"] == ERROR and message["type_name"] == "notRegistered":
                register(2)  # the broker restarted: its answer to a heartbeat says so
        if time.monotonic() >= next_heartbeat:
            sock.send_multipart([encode_header(HEARTBEAT, source=board_id), b""])
            next_heartbeat = time.monotonic() + interval
    try:  # a broker that is gone takes no goodbye: never block on it
        sock.send_multipart([encode_header(UNREGISTER, source=board_id), b""], flags=zmq.NOBLOCK)
    except zmq.Again:
        pass
    sock.close()
    zmq.Context.instance().term()


BOARD = []  # the served board's socket and id, for send() from a handler


def send(kind, type_name="", payload=b"{}", corr=0):
    """Sends a message as the board serve() runs, from inside a handler (no answer is read)."""
    sock, board_id = BOARD
    sock.send_multipart([encode_header(kind, corr=corr, source=board_id, type_name=type_name), payload])


def error(code, text):
    """An `error` answer for serve(): the code in the type name, {"code", "message"} as payload."""
    return ERROR, code, (), json.dumps({"code": code, "message": text}).encode()


def echo(message, payload):
    if message["type_name"] == "echo":
        return REPLY, "", (), payload
    return error("unknownCommand", "py board has only 'echo'")


if __name__ == "__main__":
    serve(["echo"], echo)
