# hpcwizard verify --bandwidth: TCP throughput between two instances (cluster/tcp-bandwidth).
#   --receive                      listen on a free port, print it with a one-time token, go to
#                                  the background (the ssh that started it returns), take one
#                                  sender's bytes, answer with how long they took to arrive
#   --send ADDRESS PORT TOKEN MIB  send MIB MiB there, print the figure
# A connection without the token is closed and waited past: a port scan cannot take the slot.
import hmac, os, secrets, socket, struct, sys, time

CHUNK = 1 << 20
WAIT = 60.0  # the receiver gives up on its sender after this long


def exact(conn, n):
    buf = b""
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            raise ConnectionError("closed early")
        buf += part
    return buf


def receive():
    token = secrets.token_hex(16).encode()
    if socket.has_dualstack_ipv6():
        srv = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    else:
        srv = socket.create_server(("", 0))
    print(f"HPCWIZARD-TCPBW-LISTEN port={srv.getsockname()[1]} token={token.decode()}",
          flush=True)
    if os.fork():
        os._exit(0)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    deadline = time.monotonic() + WAIT
    buf = bytearray(CHUNK)
    while time.monotonic() < deadline:
        srv.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(WAIT)
            try:
                head = exact(conn, len(token) + 8)
                if not hmac.compare_digest(head[:len(token)], token):
                    continue
                size = struct.unpack("!Q", head[len(token):])[0]
                got, t0 = 0, time.monotonic()
                while got < size:
                    n = conn.recv_into(buf)
                    if not n:
                        break
                    got += n
                conn.sendall(struct.pack("!Qd", got, time.monotonic() - t0))
            except OSError:
                continue
            return


def send(address, port, token, mib):
    size = mib << 20
    chunk = bytes(CHUNK)
    with socket.create_connection((address, port), timeout=WAIT) as conn:
        conn.sendall(token.encode() + struct.pack("!Q", size))
        sent = 0
        while sent < size:
            n = min(CHUNK, size - sent)
            conn.sendall(chunk[:n])
            sent += n
        got, seconds = struct.unpack("!Qd", exact(conn, 16))
    gbps = got * 8 / seconds / 1e9 if seconds > 0 else 0.0
    print(f"HPCWIZARD-TCPBW bytes={got} seconds={seconds:.6f} gbps={gbps:.3f}", flush=True)
    return 0 if got == size else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--receive"]:
        receive()
    else:
        sys.exit(send(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])))
