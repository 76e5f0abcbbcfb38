"""A NATS client that passes for a motherboard and lies (nats-py): it announces itself as one that
delivers actions, and answers every action that it reached 2^63 - 1 subscribers.

Usage: nats_liar.py URL FLEET
Prints READY once it has announced itself, then runs until SIGTERM.
"""
import asyncio
import json
import sys
import time
import uuid

import nats
from nats_peer import announce_until_terminated


async def main():
    url, fleet = sys.argv[1:3]
    prefix = "boardbus.%s" % fleet
    instance = "liar-" + uuid.uuid4().hex[:8]
    connection = await nats.connect(url)
    announcement = json.dumps({"instance": instance, "host": "liar", "joined": int(time.time() * 1000),
                               "intervalMilliseconds": 1000, "boards": [], "actions": True}).encode()

    async def lie(message):
        if message.reply:
            await connection.publish(message.reply, json.dumps({"delivered": 2 ** 63 - 1}).encode(),
                                     headers={"BoardBus-Status": "ok", "BoardBus-Instance": instance})

    await connection.subscribe(prefix + ".action.>", cb=lie)
    await announce_until_terminated(connection, prefix, announcement, every=0.5)
    await connection.close()


asyncio.run(main())
