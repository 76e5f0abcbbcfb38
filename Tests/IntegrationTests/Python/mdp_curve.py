#!/usr/bin/env python3
"""An MDP client over tcp with CURVE (raw pyzmq, RFC 18 framing): with an allowed key it calls
`demo.greeter` (command `greet`, or COMMAND); prints the reply's last frame, or "refused" when
no reply comes in 3 s.

usage: mdp_curve.py ENDPOINT SERVER_PUBLIC_KEY_FILE CLIENT_KEY_FILE [COMMAND]
"""
import sys

import zmq
import zmq.auth

endpoint, server_file, client_file = sys.argv[1:4]
command = sys.argv[4].encode() if len(sys.argv) > 4 else b"greet"
socket = zmq.Context.instance().socket(zmq.DEALER)
socket.setsockopt(zmq.LINGER, 0)
socket.setsockopt(zmq.RCVTIMEO, 3000)
server_public, _ = zmq.auth.load_certificate(server_file)
client_public, client_secret = zmq.auth.load_certificate(client_file)
socket.curve_serverkey = server_public
socket.curve_publickey = client_public
socket.curve_secretkey = client_secret
socket.connect(endpoint)
socket.send_multipart([b"MDPC02", b"\x01", b"demo.greeter", command, b'{"name":"far"}'])
try:
    print(socket.recv_multipart()[-1].decode())
except zmq.Again:
    print("refused")
