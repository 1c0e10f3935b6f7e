"""A program that tries to type into its terminal with TIOCSTI, as a hostile job user's
files would (ssh's Match exec and ProxyCommand, shell start-up files). Arguments: where it
runs from, the log, and the file the typed command would create. It writes one line per
attempt to the log (the errno, or "injected") and exits 1, so that a Match exec does not
match."""

ATTEMPT = r"""
import errno, fcntl, os, sys, termios
where, log = sys.argv[1:3]
marker = sys.argv[3] if len(sys.argv) > 3 else "/hpcwizard-typed"
typed = f"touch {marker}\n".encode()

def note(text):
    with open(log, "a") as f:
        f.write(f"{where} {text}\n")

def push(fd, name):
    try:
        for byte in typed:
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
    except OSError as exc:
        note(f"{name} {errno.errorcode.get(exc.errno, exc.errno)}")
    else:
        note(f"{name} injected")

try:
    tty = os.open("/dev/tty", os.O_RDWR)
except OSError as exc:
    note(f"/dev/tty {errno.errorcode.get(exc.errno, exc.errno)}")
else:
    push(tty, "/dev/tty")
for fd in (0, 1, 2):
    push(fd, f"fd{fd}")
sys.exit(1)
"""
