"""A caller of the fleet with nats-py, under the example server config's `caller` user: it calls a
board, then tries what the config does not let a caller do (announce a board, send an action).

Usage: nats_caller.py URL FLEET
Prints one JSON line: {"greet": the BoardBus-Status of its call, "refused": the permission
errors the server sent it}.
"""
import asyncio
import json
import sys

import nats


async def main():
    url, fleet = sys.argv[1:3]
    prefix = "boardbus.%s" % fleet
    refused = []

    async def error(problem):
        refused.append(str(problem))

    connection = await nats.connect(url, error_cb=error)
    reply = await connection.request(prefix + ".board.~.demo%2Egreeter.command.greet", b'{"name":"caller"}', timeout=10)
    forged = {"instance": "forged", "host": "caller", "joined": 1, "intervalMilliseconds": 1000,
              "boards": [{"id": "forged.board", "pid": 1, "commands": ["x"]}]}
    await connection.publish(prefix + ".announce", json.dumps(forged).encode())
    await connection.publish(prefix + ".action.~.app%2Eannounce", b'{"text":"forged"}')
    await connection.flush()
    await asyncio.sleep(1)
    print(json.dumps({"greet": reply.headers.get("BoardBus-Status"), "refused": refused}))
    await connection.close()


asyncio.run(main())
