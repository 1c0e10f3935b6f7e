# hpcwizard verify --bandwidth: TCP throughput between two instances (cluster/tcp-bandwidth).
#   --receive ADDRESS              listen on a free port of ADDRESS (the address the sender
#                                  connects to), print it with a one-time token, go to the
#                                  background (the ssh that started it returns), take one
#                                  sender's pings and bytes, answer with how many arrived in
#                                  how long
#   --send ADDRESS PORT MIB SECONDS
#                                  time up to PINGS small round trips (the lowest, in µs; as
#                                  many as PING_TIME allows), then send
#                                  until MIB MiB are sent or SECONDS have passed, whichever
#                                  comes first, print the figure the receiver measured; the
#                                  token comes in HPCWIZARD_TCPBW_TOKEN (a command line is
#                                  readable by every user, the environment by its owner only)
# On the wire: the sender's token and HEAD; the receiver's READY (or REFUSED); up to PINGS
# PINGs numbered from 1, each echoed, and a PING of 0 that ends them (not echoed); the bytes;
# the receiver's REPLY. Both ends are this one file,
# sent on stdin by the same verify run: they never differ.
# The pings go before the bytes, on the same connection (TCP_NODELAY: no Nagle wait): after
# them the connection is half-closed, and during them the queue the bytes fill would be timed.
# The lowest is the path's round trip: a busy CPU on either end delays some (another pair's
# bytes on the same cores), and nothing makes one faster than the path.
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
HEAD = struct.Struct("!QdI")  # after the token: the most bytes, the most seconds, pings
REPLY = struct.Struct("!Qd")  # bytes that arrived, the seconds they took
READY = REPLY.pack(0, 0.0)  # the receiver's answer to sizes in range: the pings may come
REFUSED = REPLY.pack(0, -1.0)  # the receiver's answer to sizes out of range
PING = struct.Struct("!Q")  # a round trip's number, echoed as it came
END_PINGS = PING.pack(0)
PINGS = 32  # round trips the sender times at most
MAX_PINGS = 1000
PING_TIME = 0.5  # no round trip starts after this: a path queued for seconds gives a few
PING_WAIT = 5.0  # each round trip comes back within this, or the test ends
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
                size, seconds, pings = HEAD.unpack(head[len(token):])
                conn.settimeout(REPLY_WAIT)
                if not (in_range(size, 0, MAX_MIB << 20) and in_range(seconds, 0, WAIT)
                        and in_range(pings, 0, MAX_PINGS)):
                    conn.sendall(REFUSED)
                    return
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.sendall(READY)
                if not echo(conn, pings):
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
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(token.encode() + HEAD.pack(size, seconds, PINGS))
        ready = exact(conn, REPLY.size, time.monotonic() + REPLY_WAIT)
        if ready == REFUSED:
            print(f"HPCWIZARD-TCPBW-ERROR the receiver refused {mib} MiB in {seconds:g} s",
                  flush=True)
            return 1
        if ready != READY:
            print("HPCWIZARD-TCPBW-ERROR the receiver's first answer is not READY", flush=True)
            return 1
        rtt = round_trips(conn, PINGS)
        if rtt is None:
            print("HPCWIZARD-TCPBW-ERROR the receiver echoed another number", flush=True)
            return 1
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
    got, took = REPLY.unpack(answer)
    if not (got <= sent and in_range(took, 0, WAIT + REPLY_WAIT)):
        print(f"HPCWIZARD-TCPBW-ERROR the receiver's answer is out of range: {got} bytes of "
              f"{sent} sent in {took!r} s", flush=True)
        return 1
    gbps = got * 8 / took / 1e9 if took > 0 else 0.0
    print(f"HPCWIZARD-TCPBW bytes={got} seconds={took:.6f} gbps={gbps:.3f} sent={sent} "
          f"rtt_us={rtt * 1e6:.1f}", flush=True)
    return 0


def echo(conn, most):
    """The receiver's half of the round trips: each PING sent back as it came, until the 0
    that ends them. False when more than most come, or they outlast the sender's bounds."""
    deadline = time.monotonic() + PING_TIME + 2 * PING_WAIT  # the last ping's wait, then the 0
    for _ in range(most):
        ping = exact(conn, PING.size, deadline)
        if ping == END_PINGS:
            return True
        conn.sendall(ping)
    return exact(conn, PING.size, deadline) == END_PINGS


def round_trips(conn, most):
    """The lowest of the round trips timed, in seconds (this end's clock alone: nothing the
    other end says is a time): up to most, none started after PING_TIME; then the 0 that
    ends them. None when an echo is not the number sent."""
    times, stop = [], time.monotonic() + PING_TIME
    for i in range(1, most + 1):
        if times and time.monotonic() > stop:
            break
        ping = PING.pack(i)
        t0 = time.perf_counter()
        conn.sendall(ping)
        if exact(conn, PING.size, time.monotonic() + PING_WAIT) != ping:
            return None
        times.append(time.perf_counter() - t0)
    conn.sendall(END_PINGS)
    return min(times)


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
