"""A plain NATS client on a server that asks no credentials (nats-py), forging what motherboards
say as themselves (PROTOCOL §10): `auth.login`'s output as the subject was before hosts were named
and under a host that does not serve it, a board announced as host-b on another host's subject, a
withdrawal of host-b's instance from another host's subject, a host-b announcement of the same
instance as another host. Then, subscribed to `auth.login`'s requests beside host-b, it answers the
first one it hears before host-b can, on the reply subject without its random token and with
another token: neither is an answer.

Usage: nats_forger.py URL FLEET
Prints `ready` once subscribed, then (after the first request, or 20 s) `forged answers N`.
"""
import asyncio
import json
import sys

import nats


async def main():
    url, fleet = sys.argv[1:3]
    prefix = "boardbus.%s" % fleet
    connection = await nats.connect(url)
    heard = asyncio.get_running_loop().create_future()

    async def announcement(message):
        body = json.loads(message.data)
        if body.get("host") == "host-b" and not heard.done():
            heard.set_result(body["instance"])

    requested = asyncio.get_running_loop().create_future()

    async def request(message):
        if message.reply and not requested.done():
            base, _, _ = message.reply.rpartition("-")
            forged_answer = b'{"users":["mallory"]}'
            for reply in [base, base + "-0000", message.reply.rpartition(".")[0] + ".1-" + message.reply.rpartition("-")[2] + "0"]:
                await connection.publish(reply, forged_answer, headers={"BoardBus-Status": "ok", "BoardBus-Instance": "forged"})
            requested.set_result(3)

    await connection.subscribe(prefix + ".announce.*", cb=announcement)
    await connection.subscribe(prefix + ".board.~.auth%2Elogin.>", cb=request)
    await connection.flush()
    print("ready", flush=True)
    instance = await asyncio.wait_for(heard, timeout=10)
    login = b'{"username":"mallory","token":"forged"}'
    await connection.publish(prefix + ".output.~.auth%2Elogin.LoginSucceeded", login)
    await connection.publish(prefix + ".output.host-c.~.auth%2Elogin.LoginSucceeded", login)
    forged = {"instance": "forged", "host": "host-b", "joined": 1, "intervalMilliseconds": 1000,
              "boards": [{"id": "forged.board", "pid": 1, "commands": ["x"]}]}
    await connection.publish(prefix + ".announce.evil", json.dumps(forged).encode())
    # host-b's own instance, announced by another host with no boards: host-b's would go.
    await connection.publish(prefix + ".announce.evil", json.dumps(dict(forged, instance=instance, host="evil", boards=[])).encode())
    for _ in range(6):
        await connection.publish(prefix + ".withdraw.evil", json.dumps({"instance": instance}).encode())
        await connection.flush()
        await asyncio.sleep(0.5)
    try:
        count = await asyncio.wait_for(requested, timeout=20)
    except asyncio.TimeoutError:
        count = 0
    print("forged answers", count, flush=True)
    await connection.close()


asyncio.run(main())
