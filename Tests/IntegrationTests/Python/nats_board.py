"""A board served by a plain NATS program (nats-py), from PROTOCOL.md §10 alone.

Usage: nats_board.py URL FLEET
Announces board `py.echo` (command `echo`, which answers with its payload, `fail`, which answers
a typed error, and any other command is `unknownCommand`) every second as a motherboard would, serves its subject, prints READY, and
withdraws on SIGTERM.
"""
import asyncio
import json
import sys
import time
import uuid

import nats
from nats_peer import announce_until_terminated, host_token


async def main():
    url, fleet = sys.argv[1:3]
    prefix = "boardbus.%s" % fleet
    instance = uuid.uuid4().hex[:16]
    connection = await nats.connect(url)
    announcement = json.dumps({
        "instance": instance, "host": "python", "joined": int(time.time() * 1000), "intervalMilliseconds": 1000,
        "boards": [{"id": "py.echo", "pid": 0, "commands": ["echo", "fail"]}],
    }).encode()

    async def serve(message):
        command = message.subject.split(".")[-1]
        if command == "echo":
            await connection.publish(message.reply, message.data, headers={"BoardBus-Status": "ok", "BoardBus-Instance": instance})
        else:
            code, text = ("rejected", "py.echo says no") if command == "fail" else ("unknownCommand", "py.echo has no command %s" % command)
            error = json.dumps({"code": code, "message": text}).encode()
            await connection.publish(message.reply, error, headers={"BoardBus-Status": code, "BoardBus-Instance": instance})

    async def hello(message):
        await connection.publish(prefix + ".announce." + host_token("python"), announcement)

    await connection.subscribe(prefix + ".board.~.py%2Eecho.command.*", cb=serve)
    await connection.subscribe(prefix + ".hello", cb=hello)
    await announce_until_terminated(connection, prefix, announcement)
    await connection.publish(prefix + ".withdraw." + host_token("python"), json.dumps({"instance": instance}).encode())
    await connection.flush()
    await connection.close()


asyncio.run(main())
