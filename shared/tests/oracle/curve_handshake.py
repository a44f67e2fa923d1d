"""Oracle for flux_shared::curve: does libzmq accept a certificate we wrote?

Usage: curve_handshake.py CERT_PATH EXPECTED_PUBLIC_Z85 EXPECTED_NAME

Loads the zcert file with pyzmq's zmq.auth.load_certificate, checks its keys
with libzmq (the public key must be libzmq's zmq_curve_public of the secret
key), then runs a real CURVE handshake over TCP on 127.0.0.1:

  * positive: a REP server using the certificate's secret key and a REQ
    client with its own fresh key pair that trusts the certificate's public
    key must exchange a request and a reply;
  * negative: a client that trusts a different server public key must not
    get a message through within the timeout.

Every receive has a timeout, so a failed handshake fails fast instead of
hanging. Exits 0 and prints a line starting with "OK" on success; prints
"FAIL: ..." to stderr and exits 1 on any mismatch.
"""

import sys

import zmq
import zmq.auth
from zmq.utils import z85

# Generous for the positive exchange on a loaded 2-core machine.
EXCHANGE_TIMEOUT_MS = 10_000
# How long the negative case waits for a message that must never arrive.
NEGATIVE_WAIT_MS = 1_500


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check_certificate(path, expected_public, expected_name):
    """Load the certificate with pyzmq and check it against libzmq."""
    public, secret = zmq.auth.load_certificate(path)
    if secret is None:
        fail("zmq.auth.load_certificate found no secret key")
    if public.decode("ascii") != expected_public:
        fail(f"public key in file {public!r} != expected {expected_public!r}")
    for label, key in (("public", public), ("secret", secret)):
        if len(key) != 40 or len(z85.decode(key)) != 32:
            fail(f"{label} key is not 40 Z85 characters encoding 32 bytes")
    derived = zmq.curve_public(secret)
    if derived != public:
        fail(f"libzmq derives public key {derived!r} from the secret, file has {public!r}")

    with open(path, encoding="ascii") as f:
        lines = f.read().split("\n")
    if lines[:3] != ["#  ZeroMQ CURVE **Secret** Certificate", "#  DO NOT DISTRIBUTE", ""]:
        fail(f"unexpected header lines {lines[:3]!r}")
    if "metadata" not in lines or "curve" not in lines:
        fail("missing 'metadata' or 'curve' section line")
    name_line = f'    name = "{expected_name}"'
    if name_line not in lines:
        fail(f"no line {name_line!r} in the certificate")
    return public, secret


def make_socket(ctx, kind):
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, EXCHANGE_TIMEOUT_MS)
    sock.setsockopt(zmq.SNDTIMEO, EXCHANGE_TIMEOUT_MS)
    return sock


def make_client(ctx, endpoint, server_public):
    client_public, client_secret = zmq.curve_keypair()
    client = make_socket(ctx, zmq.REQ)
    client.curve_serverkey = server_public
    client.curve_publickey = client_public
    client.curve_secretkey = client_secret
    client.connect(endpoint)
    return client


def run(public, secret):
    ctx = zmq.Context()
    try:
        server = make_socket(ctx, zmq.REP)
        server.curve_server = True
        server.curve_secretkey = secret
        server.curve_publickey = public
        port = server.bind_to_random_port("tcp://127.0.0.1")
        endpoint = f"tcp://127.0.0.1:{port}"

        # Positive: a client trusting our public key gets through.
        client = make_client(ctx, endpoint, public)
        try:
            client.send(b"ping")
            request = server.recv()
        except zmq.Again:
            fail("CURVE handshake with the certificate's public key did not complete in time")
        if request != b"ping":
            fail(f"server received {request!r}, expected b'ping'")
        server.send(b"pong")
        try:
            reply = client.recv()
        except zmq.Again:
            fail("client did not receive the reply in time")
        if reply != b"pong":
            fail(f"client received {reply!r}, expected b'pong'")
        client.close()

        # Negative: a client trusting some other server key must not get in.
        wrong_public, _ = zmq.curve_keypair()
        if wrong_public == public:
            fail("random key pair collided with the certificate")
        intruder = make_client(ctx, endpoint, wrong_public)
        try:
            intruder.send(b"intruder")
        except zmq.Again:
            pass  # not even queued: the exchange certainly did not complete
        if server.poll(NEGATIVE_WAIT_MS, zmq.POLLIN):
            fail(f"server received {server.recv()!r} from a client with the wrong server key")
        if intruder.poll(0, zmq.POLLIN):
            fail("client with the wrong server key received a reply")
        intruder.close()
        server.close()
    finally:
        ctx.destroy(linger=0)


def main():
    if len(sys.argv) != 4:
        fail(f"usage: {sys.argv[0]} CERT_PATH EXPECTED_PUBLIC_Z85 EXPECTED_NAME")
    path, expected_public, expected_name = sys.argv[1:]
    if not zmq.has("curve"):
        fail(f"libzmq {zmq.zmq_version()} has no CURVE support")
    public, secret = check_certificate(path, expected_public, expected_name)
    run(public, secret)
    print(f"OK: libzmq {zmq.zmq_version()} (pyzmq {zmq.pyzmq_version()}) accepted the certificate; "
          "handshake succeeded with the right server key and failed with a wrong one")


if __name__ == "__main__":
    main()
