"""A NATS client that lies for a motherboard (nats-py): it learns the fleet's motherboards from
their announcements and answers every action, before they do, in the name of one of them, that it
reached 2^63 - 1 subscribers.

Usage: nats_liar.py URL FLEET
Prints READY once it knows a motherboard, then runs until SIGTERM.
"""
import asyncio
import json
import signal
import sys

import nats


async def main():
    url, fleet = sys.argv[1:3]
    prefix = "boardbus.%s" % fleet
    connection = await nats.connect(url)
    instances = []
    known = asyncio.Event()

    async def announced(message):
        instance = json.loads(message.data).get("instance")
        if instance and instance not in instances:
            instances.append(instance)
            known.set()

    async def lie(message):
        if message.reply:
            for instance in instances:
                await connection.publish(message.reply, json.dumps({"delivered": 2 ** 63 - 1}).encode(),
                                         headers={"BoardBus-Status": "ok", "BoardBus-Instance": instance})

    await connection.subscribe(prefix + ".announce", cb=announced)
    await connection.subscribe(prefix + ".action.>", cb=lie)
    await asyncio.wait_for(known.wait(), timeout=20)
    print("READY", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await connection.close()


asyncio.run(main())
