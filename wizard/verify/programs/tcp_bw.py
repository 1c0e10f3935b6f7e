# hpcwizard verify --bandwidth: TCP throughput between two instances (cluster/tcp-bandwidth).
#   --receive ADDRESS              listen on a free port of ADDRESS (the address the sender
#                                  connects to), print it with a one-time token, go to the
#                                  background (the ssh that started it returns), take one
#                                  sender's bytes, answer with how many arrived in how long
#   --send ADDRESS PORT MIB SECONDS
#                                  send until MIB MiB are sent or SECONDS have passed, whichever
#                                  comes first, print the figure the receiver measured; the
#                                  token comes in HPCWIZARD_TCPBW_TOKEN (a command line is
#                                  readable by every user, the environment by its owner only)
# Bound to the one address, not every one: a scan of the others never reaches it. A
# connection that does not send the token within HEADER_WAIT is closed and waited past, until
# WAIT: a port scan or a load balancer's probe cannot take the slot.
# The time bound, not the size, ends a slow link's test: it gives a low figure (a FAIL), not a
# time-out that reads as a firewall.
# Every number from the other end is checked (finite, in range) before it is used: sizes out
# of range get the REFUSED answer, a reply out of range one error line.
import hmac, ipaddress, math, os, secrets, socket, struct, sys, time

CHUNK = 1 << 20
WAIT = 60.0  # the receiver gives up on its sender after this long
HEADER_WAIT = 5.0  # a connection's token and sizes arrive within this, or it is not the sender
REPLY_WAIT = 15.0  # past the time bound: the receiver's answer arrives within this
HEAD = struct.Struct("!Qd")  # after the token: the most bytes, the most seconds
REPLY = struct.Struct("!Qd")  # bytes that arrived, the seconds they took
REFUSED = REPLY.pack(0, -1.0)  # the receiver's answer to sizes out of range
MAX_MIB = 1 << 20  # 1 TiB: more than any time bound carries
TOKEN_ENV = "HPCWIZARD_TCPBW_TOKEN"


def in_range(value, low, high):
    """value is a finite number with low < value <= high."""
    return math.isfinite(value) and low < value <= high


def fail(message):
    print(f"HPCWIZARD-TCPBW-ERROR {message}", flush=True)
    sys.exit(2)


def exact(conn, n, deadline):
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("too slow")
        conn.settimeout(left)
        part = conn.recv(n - len(buf))
        if not part:
            raise ConnectionError("closed early")
        buf += part
    return buf


def measure(conn, size, seconds, buf):
    """Count what arrives until the sender's end (EOF) or the time bound: bytes still on the
    way at the bound are not counted, nor is their time."""
    got, t0 = 0, time.monotonic()
    end = t0 + seconds
    while got <= size:
        left = end - time.monotonic()
        if left <= 0:
            break
        conn.settimeout(left)
        try:
            n = conn.recv_into(buf)
        except socket.timeout:
            break
        if not n:
            break
        got += n
    return got, time.monotonic() - t0


def receive(address):
    token = secrets.token_hex(16).encode()
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        srv = socket.create_server((str(address), 0), family=family)
    except OSError as e:
        fail(f"cannot listen on {address}: {e}")
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
            try:
                head = exact(conn, len(token) + HEAD.size, time.monotonic() + HEADER_WAIT)
                if not hmac.compare_digest(head[:len(token)], token):
                    continue
                size, seconds = HEAD.unpack(head[len(token):])
                conn.settimeout(REPLY_WAIT)
                if not (in_range(size, 0, MAX_MIB << 20) and in_range(seconds, 0, WAIT)):
                    conn.sendall(REFUSED)
                    return
                got, took = measure(conn, size, seconds, buf)
                conn.settimeout(REPLY_WAIT)  # measure left its last, short time-out
                conn.sendall(REPLY.pack(got, took))
            except OSError:
                continue
            try:
                # read on to the sender's end: closed with bytes unread, the socket would
                # reset the connection under the answer
                conn.shutdown(socket.SHUT_WR)
                drained = time.monotonic() + REPLY_WAIT
                while time.monotonic() < drained and conn.recv_into(buf):
                    pass
            except OSError:
                pass
            return


def send(address, port, token, mib, seconds):
    try:
        return send_for(address, port, token, mib, seconds)
    except OSError as e:
        print(f"HPCWIZARD-TCPBW-ERROR {address} port {port}: {e}", flush=True)
        return 1


def send_for(address, port, token, mib, seconds):
    size = mib << 20
    chunk = memoryview(bytes(CHUNK))
    with socket.create_connection((address, port), timeout=HEADER_WAIT) as conn:
        conn.sendall(token.encode() + HEAD.pack(size, seconds))
        sent, end = 0, time.monotonic() + seconds
        while sent < size:
            left = end - time.monotonic()
            if left <= 0:
                break
            conn.settimeout(left)
            try:
                sent += conn.send(chunk[:min(CHUNK, size - sent)])
            except socket.timeout:
                break
        conn.shutdown(socket.SHUT_WR)
        answer = exact(conn, REPLY.size, time.monotonic() + REPLY_WAIT)
    if answer == REFUSED:
        print(f"HPCWIZARD-TCPBW-ERROR the receiver refused {mib} MiB in {seconds:g} s",
              flush=True)
        return 1
    got, took = REPLY.unpack(answer)
    if not (got <= sent and in_range(took, 0, WAIT + REPLY_WAIT)):
        print(f"HPCWIZARD-TCPBW-ERROR the receiver's answer is out of range: {got} bytes of "
              f"{sent} sent in {took!r} s", flush=True)
        return 1
    gbps = got * 8 / took / 1e9 if took > 0 else 0.0
    print(f"HPCWIZARD-TCPBW bytes={got} seconds={took:.6f} gbps={gbps:.3f} sent={sent}",
          flush=True)
    return 0


def main(argv):
    if argv[:1] == ["--receive"] and len(argv) == 2:
        try:
            address = ipaddress.ip_address(argv[1])
        except ValueError:
            fail(f"not an IP address: {argv[1]!r}")
        receive(address)
        return 0
    if argv[:1] == ["--send"] and len(argv) == 5:
        token = os.environ.get(TOKEN_ENV, "")
        try:
            address = str(ipaddress.ip_address(argv[1]))
            port, mib, seconds = int(argv[2]), int(argv[3]), float(argv[4])
        except ValueError as e:
            fail(f"bad argument: {e}")
        if not (0 < port < 65536 and 0 < mib <= MAX_MIB and in_range(seconds, 0, WAIT)
                and len(token) == 32 and token.isascii()):
            fail(f"usage: {TOKEN_ENV}=TOKEN --send ADDRESS PORT MIB SECONDS (1-65535, "
                 f"0 < MIB <= {MAX_MIB}, 0 < SECONDS <= {WAIT:g}, a 32-character token)")
        return send(address, port, token, mib, seconds)
    fail(f"usage: --receive ADDRESS | {TOKEN_ENV}=TOKEN --send ADDRESS PORT MIB SECONDS")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
