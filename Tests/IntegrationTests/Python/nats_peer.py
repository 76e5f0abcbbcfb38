"""What the NATS programs of the tests that pass for a motherboard share (PROTOCOL §10)."""
import asyncio
import signal


async def announce_until_terminated(connection, prefix, announcement, every=1.0):
    """Announces `announcement` on the fleet's announce subject, prints READY, then again every
    `every` seconds until SIGTERM."""
    await connection.publish(prefix + ".announce", announcement)
    await connection.flush()
    print("READY", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    while not stop.is_set():
        await connection.publish(prefix + ".announce", announcement)
        try:
            await asyncio.wait_for(stop.wait(), timeout=every)
        except asyncio.TimeoutError:
            pass
