"""An attacker of the fleet with nats-py, under the example server config (fleet/nats/server.conf).

As its `caller` user (inbox prefix `_INBOX.caller`) it calls a board, then tries what a caller
must not do: announce a board, send an action, hear every answer (`_INBOX.>`), answer another
motherboard's request (publish on its inbox), pass an output off as host-b's `auth.login`. As
host-a's user it tries to speak for host-b: its output, its announcement, its withdrawal.

Usage: nats_caller.py URL FLEET CALLER_PASSWORD HOST_A_PASSWORD
Prints one JSON line: {"greet": the BoardBus-Status of its call, "refused": the permission
errors the server sent, "heard": subjects it heard on `_INBOX.>`}.
"""
import asyncio
import json
import sys
from urllib.parse import urlsplit, urlunsplit

import nats


def with_user(url, user, password):
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc="%s:%s@%s" % (user, password, parts.netloc.split("@")[-1])))


async def main():
    url, fleet, caller_password, host_a_password = sys.argv[1:5]
    prefix = "boardbus.%s" % fleet
    refused = []
    heard = []

    async def error(problem):
        refused.append(str(problem))

    caller = await nats.connect(with_user(url, "caller", caller_password), error_cb=error, inbox_prefix="_INBOX.caller")
    reply = await caller.request(prefix + ".board.~.demo%2Egreeter.command.greet", b'{"name":"caller"}', timeout=10)

    async def listen(message):
        heard.append(message.subject)

    await caller.subscribe("_INBOX.>", cb=listen)
    forged = {"instance": "forged", "host": "caller", "joined": 1, "intervalMilliseconds": 1000,
              "boards": [{"id": "forged.board", "pid": 1, "commands": ["x"]}]}
    await caller.publish(prefix + ".announce.caller", json.dumps(forged).encode())
    await caller.publish(prefix + ".action.caller.~.app%2Eannounce", b'{"text":"forged"}')
    login = b'{"username":"mallory","token":"forged"}'
    await caller.publish(prefix + ".output.host-b.~.auth%2Elogin.LoginSucceeded", login)
    await caller.publish("_INBOX.boardbus.%s.host-a.0.1-0" % fleet, b"{}", headers={"BoardBus-Status": "ok"})
    await caller.flush()

    host_a = await nats.connect(with_user(url, "host-a", host_a_password), error_cb=error)
    await host_a.publish(prefix + ".output.host-b.~.auth%2Elogin.LoginSucceeded", login)
    await host_a.publish(prefix + ".announce.host-b", json.dumps(dict(forged, host="host-b")).encode())
    await host_a.publish(prefix + ".withdraw.host-b", b'{"instance":"any"}')
    await host_a.flush()
    await asyncio.sleep(1)
    print(json.dumps({"greet": reply.headers.get("BoardBus-Status"), "refused": refused, "heard": heard}))
    await caller.close()
    await host_a.close()


asyncio.run(main())
