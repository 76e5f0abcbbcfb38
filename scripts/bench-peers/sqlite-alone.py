#!/usr/bin/env python3
"""SQLite alone making what a keyed store's `place` dispatch writes, on the same database.

Usage: sqlite-alone.py DATABASE TRANSACTIONS
Each transaction, as BoardBus's SQLiteRecords does for one dispatch: read the key, upsert its
row, the store's sequence and a journal row, in one BEGIN IMMEDIATE transaction, with SQLite's
defaults (rollback journal, synchronous FULL), as GRDB opens it. Prints the median in µs.
"""
import sqlite3
import statistics
import sys
import time

path, count = sys.argv[1], int(sys.argv[2])
db = sqlite3.connect(path, isolation_level=None)
(sequence,) = db.execute("SELECT sequence FROM store_state WHERE store = 'orders'").fetchone()
record = b'{"cents":250,"item":"jam","status":"placed"}'
times = []
for index in range(count):
    key = f"S-{index}"
    start = time.perf_counter_ns()
    db.execute("BEGIN IMMEDIATE")
    db.execute("SELECT record FROM store_records WHERE store = 'orders' AND key = ?", (key,)).fetchone()
    db.execute(
        "INSERT INTO store_records (store, key, record) VALUES ('orders', ?, ?) "
        "ON CONFLICT(store, key) DO UPDATE SET record = excluded.record", (key, record))
    sequence += 1
    db.execute(
        "INSERT INTO store_state (store, sequence, snapshot) VALUES ('orders', ?, x'') "
        "ON CONFLICT(store) DO UPDATE SET sequence = excluded.sequence, snapshot = excluded.snapshot", (sequence,))
    db.execute(
        "INSERT INTO dispatch_journal (store, dispatch_id, sequence, action, payload) VALUES ('orders', ?, ?, 'place', ?)",
        (f"s-{index}", sequence, record))
    db.execute("COMMIT")
    times.append(time.perf_counter_ns() - start)
print(f"{statistics.median(times) / 1000:.1f}")
