"""A NATS client that passes for a motherboard and lies (nats-py): it announces itself as one that
delivers actions, and answers every action that it reached 2^63 - 1 subscribers.

Usage: nats_liar.py URL FLEET
Prints READY once it has announced itself, then runs until SIGTERM.
"""
import asyncio
import json
import signal
import sys
import time
import uuid

import nats


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
    await connection.publish(prefix + ".announce", announcement)
    await connection.flush()
    print("READY", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    while not stop.is_set():
        await connection.publish(prefix + ".announce", announcement)
        try:
            await asyncio.wait_for(stop.wait(), timeout=0.5)
        except asyncio.TimeoutError:
            pass
    await connection.close()


asyncio.run(main())
