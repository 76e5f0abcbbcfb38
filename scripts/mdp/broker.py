#!/usr/bin/env python3
"""majortomo's own MDP broker, for the benchmark's comparison row. usage: broker.py ENDPOINT"""
import sys

from majortomo.broker import Broker

broker = Broker(bind=sys.argv[1])
# run() binds; ZeroMQ peers that connect first are connected once it has.
print("READY", flush=True)
broker.run()
