"""Calls a BoardBus board with a plain NATS request (nats-py), from PROTOCOL.md §10 alone.

Usage: nats_call.py URL FLEET SCOPE BOARD COMMAND PAYLOAD
Prints one JSON line: {"status": BoardBus-Status header, "payload": the reply's payload as JSON}.
"""
import asyncio
import json
import sys

import nats


def token(name):
    """A name as one subject token: A-Z a-z 0-9 _ - as they are, every other UTF-8 byte %XX."""
    if not name:
        return "~"
    plain = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
    return "".join(chr(b) if b in plain else "%%%02X" % b for b in name.encode("utf-8"))


async def main():
    url, fleet, scope, board, command, payload = sys.argv[1:7]
    connection = await nats.connect(url, connect_timeout=5)
    try:
        subject = "boardbus.%s.board.%s.%s.command.%s" % (fleet, token(scope), token(board), token(command))
        reply = await connection.request(
            subject, payload.encode("utf-8"), timeout=10,
            headers={"Content-Type": "application/json", "BoardBus-Timeout": "10000"})
        print(json.dumps({"subject": subject, "status": (reply.headers or {}).get("BoardBus-Status"),
                          "payload": json.loads(reply.data)}))
    finally:
        await connection.close()


asyncio.run(main())
