"""A NATS client that tries to break a fleet's motherboards through their subjects (nats-py).

Usage: nats_hostile.py URL FLEET
Publishes garbage announcements, actions and requests, then prints one JSON line per request it
made: {"name": what it tried, "status": the BoardBus-Status answer or "timeout"}.
"""
import asyncio
import json
import sys

import nats
from nats.errors import NoRespondersError, TimeoutError
from nats_peer import host_token


async def main():
    url, fleet = sys.argv[1:3]
    prefix = "boardbus.%s" % fleet
    connection = await nats.connect(url, connect_timeout=5)
    results = []

    async def request(name, subject, payload=b"{}", headers=None):
        try:
            reply = await connection.request(subject, payload, timeout=5, headers=headers)
            results.append({"name": name, "status": (reply.headers or {}).get("BoardBus-Status"),
                            "payload": reply.data.decode("utf-8", "replace")[:300]})
        except NoRespondersError:
            results.append({"name": name, "status": "noResponders"})
        except TimeoutError:
            results.append({"name": name, "status": "timeout"})

    # The board is served: it answers (within 20 s) before the attack starts.
    for _ in range(200):
        try:
            await connection.request(prefix + ".board.~.demo%2Egreeter.command.stats", b"{}", timeout=1)
            break
        except (NoRespondersError, TimeoutError):
            await asyncio.sleep(0.1)

    # Announcements that are not: not JSON, the wrong shape, numbers out of range, ids that are
    # not ids, a huge list, an instance id past its limit.
    garbage = [b"not json", b"{}", b"[]", b'{"instance": "x", "host": "h", "joined": 1e20, "intervalMilliseconds": 1000, "boards": []}',
               b'{"instance": "x", "host": "h", "joined": "nan", "intervalMilliseconds": 1000, "boards": []}',
               json.dumps({"instance": "y" * 65, "host": "h", "joined": 1, "intervalMilliseconds": 1000, "boards": []}).encode(),
               json.dumps({"instance": "z", "host": "", "joined": 1, "intervalMilliseconds": 1000, "boards": []}).encode(),
               json.dumps({"instance": "w", "host": "evil", "joined": 1, "intervalMilliseconds": 1000,
                           "boards": [{"id": bad, "pid": 1} for bad in ["", "a b", "x" * 300, "é/\u0000"]]}).encode(),
               json.dumps({"instance": "many", "host": "evil", "joined": 1, "intervalMilliseconds": 1000,
                           "boards": [{"id": "flood.b%d" % i, "pid": 1} for i in range(5000)]}).encode()]
    for payload in garbage:
        # On the subject of the host it names (where it has one), as a motherboard would.
        try:
            host = json.loads(payload).get("host")
        except (ValueError, AttributeError):
            host = None
        await connection.publish(prefix + ".announce." + (host_token(host) if isinstance(host, str) and host else "evil"), payload)
    await connection.publish(prefix + ".withdraw.evil", b"\xff\xfe")
    await connection.publish(prefix + ".hello", b"")
    # Actions with subjects that are not action subjects (no host, the empty host), and bad tokens.
    for subject in [prefix + ".action", prefix + ".action.~", prefix + ".action.evil.%ZZ.x", prefix + ".action.evil.~.%41",
                    prefix + ".action.~.~.app%2Eannounce", prefix + ".action.~.app%2Eannounce"]:
        await connection.publish(subject, b"{}")
    await request("action with a bad token", prefix + ".action.evil.%zz.app%2Eannounce")
    # Requests: an unknown board, bad tokens, a kind that is not a request, a store watch, a
    # timeout that is no number, a payload that is not the command's, headers at their limits.
    await request("unknown board", prefix + ".board.~.no%2Esuch.command.greet")
    await request("bad token", prefix + ".board.~.demo%2egreeter.command.greet")
    await request("action kind", prefix + ".board.~.demo%2Egreeter.action.greet")
    await request("store watch", prefix + ".store.~.annotationFilter.store.subscribe")
    for timeout in ["nan", "inf", "-0", "1e20", "4294967296", "-1", ""]:
        await request("timeout " + timeout, prefix + ".board.~.demo%2Egreeter.command.greet", b'{"name":"t"}',
                      {"BoardBus-Timeout": timeout} if timeout else None)
    await request("wrong payload", prefix + ".board.~.demo%2Egreeter.command.greet", b'{"name": 5}')
    await request("not json", prefix + ".board.~.demo%2Egreeter.command.greet", b"\xff\x00")
    await request("headers past their limits", prefix + ".board.~.demo%2Egreeter.command.greet", b'{"name":"h"}',
                  {"traceparent": "zz" * 300, "tracestate": "\u00e9" * 300, "Content-Type": "x" * 300, "BoardBus-Dispatch-Id": "d" * 300})
    await request("unknown content type", prefix + ".board.~.demo%2Egreeter.command.greet", b'{"name":"c"}', {"Content-Type": "application/x-nope"})
    await request("control bytes in the content type", prefix + ".board.~.demo%2Egreeter.command.greet", b'{"name":"b"}',
                  {"Content-Type": "application/json\u0001"})
    await request("a trace state without its trace", prefix + ".board.~.demo%2Egreeter.command.greet", b'{"name":"s"}',
                  {"tracestate": "a=b"})
    # A request whose reply subject is the fleet's own: an answer there would be an action.
    forged = []

    async def heard(message):
        forged.append(message.subject)

    await connection.subscribe(prefix + ".action.evil.~.forged", cb=heard)
    await connection.publish(prefix + ".board.~.demo%2Egreeter.command.nope", b"{}", reply=prefix + ".action.evil.~.forged")
    await connection.flush()
    await asyncio.sleep(1)
    results.append({"name": "answers on the fleet's subjects", "status": str(len(forged))})
    await connection.flush()
    for result in results:
        print(json.dumps(result))
    await connection.close()


asyncio.run(main())
