"""What the NATS programs of the tests that pass for a motherboard share (PROTOCOL §10)."""
import asyncio
import json
import signal


def host_token(host):
    """A host name as one subject token (PROTOCOL §10: `A-Z a-z 0-9 _ -` as they are, every other
    byte of its UTF-8 as `%XX`)."""
    plain = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
    return "".join(chr(b) if b in plain else "%%%02X" % b for b in host.encode())


async def announce_until_terminated(connection, prefix, announcement, every=1.0):
    """Announces `announcement` on its host's announce subject, prints READY, then again every
    `every` seconds until SIGTERM."""
    subject = prefix + ".announce." + host_token(json.loads(announcement)["host"])
    await connection.publish(subject, announcement)
    await connection.flush()
    print("READY", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    while not stop.is_set():
        await connection.publish(subject, announcement)
        try:
            await asyncio.wait_for(stop.wait(), timeout=every)
        except asyncio.TimeoutError:
            pass
