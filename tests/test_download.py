"""The UCX package download against a local HTTP server on 127.0.0.1 (http.server in a
thread, with Range support and switches to cut a transfer, stall, or ignore Range)."""
from __future__ import annotations

import hashlib
import http.server
import os
import subprocess
import sys
import threading
import time

import pytest

from hpcwizard.download import DownloadError, LineProgress, download, main

BODY = os.urandom(3 * 1024 * 1024 + 123)  # a little over three chunks of progress
SHA = hashlib.sha256(BODY).hexdigest()


class Server:
    """Knobs: cut_after (bytes before dropping the first response), stall (seconds before
    sending), ignore_range; requests records (path, Range header) of each request."""

    def __init__(self):
        self.cut_after = None
        self.stall = 0.0
        self.ignore_range = False
        self.requests = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                rng = self.headers.get("Range", "")
                server.requests.append((self.path, rng))
                if self.path != "/ucx_1.18.1_amd64.deb":
                    self.send_response(404, "Not Found")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = 0
                if rng.startswith("bytes=") and not server.ignore_range:
                    start = int(rng[6:].split("-")[0])
                if start >= len(BODY) and start:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(BODY)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = BODY[start:]
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(BODY) - 1}/{len(BODY)}")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if server.stall:
                    time.sleep(server.stall)
                if server.cut_after is not None:
                    cut, server.cut_after = server.cut_after, None  # only the first response
                    self.wfile.write(data[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the timeout test)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str = "ucx_1.18.1_amd64.deb") -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/{name}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def test_full_download_records_sha256(server, tmp_path):
    dest = tmp_path / "ucx.deb"
    seen = []
    digest = download(server.url(), str(dest), progress=lambda got, total: seen.append((got, total)))
    assert digest == SHA
    assert dest.read_bytes() == BODY
    assert (tmp_path / "ucx.deb.sha256").read_text() == f"{SHA}  ucx.deb\n"
    assert not (tmp_path / "ucx.deb.part").exists()
    assert seen[-1] == (len(BODY), len(BODY))


def test_a_cut_transfer_resumes_with_range(server, tmp_path):
    server.cut_after = 1_000_000
    dest = tmp_path / "ucx.deb"
    assert download(server.url(), str(dest), SHA) == SHA
    assert dest.read_bytes() == BODY
    ranges = [r for _, r in server.requests]
    assert len(ranges) == 2 and ranges[0] == "", ranges
    # resumed from what had been written (whole chunks of what arrived), not from zero
    assert ranges[1].startswith("bytes=") and 0 < int(ranges[1][6:-1]) <= 1_000_000, ranges


def test_a_partial_file_from_an_earlier_run_is_resumed(server, tmp_path):
    dest = tmp_path / "ucx.deb"
    (tmp_path / "ucx.deb.part").write_bytes(BODY[:12345])
    assert download(server.url(), str(dest), SHA) == SHA
    assert server.requests == [("/ucx_1.18.1_amd64.deb", "bytes=12345-")]
    assert dest.read_bytes() == BODY


def test_a_complete_partial_file_needs_no_bytes(server, tmp_path):
    dest = tmp_path / "ucx.deb"
    (tmp_path / "ucx.deb.part").write_bytes(BODY)
    assert download(server.url(), str(dest), SHA) == SHA
    assert dest.read_bytes() == BODY


def test_a_server_ignoring_range_gets_the_whole_file_again(server, tmp_path):
    server.ignore_range = True
    dest = tmp_path / "ucx.deb"
    (tmp_path / "ucx.deb.part").write_bytes(b"garbage that must not stay in front")
    assert download(server.url(), str(dest), SHA) == SHA
    assert dest.read_bytes() == BODY


def test_a_wrong_sha256_is_refused_and_the_partial_file_removed(server, tmp_path):
    dest = tmp_path / "ucx.deb"
    with pytest.raises(DownloadError) as exc:
        download(server.url(), str(dest), "0" * 64)
    msg = str(exc.value)
    assert "sha256 mismatch" in msg and SHA in msg and "\n" not in msg
    assert not dest.exists() and not (tmp_path / "ucx.deb.part").exists()
    assert not (tmp_path / "ucx.deb.sha256").exists()


def test_404_is_one_clear_line(server, tmp_path, capsys):
    dest = tmp_path / "ucx.deb"
    with pytest.raises(DownloadError) as exc:
        download(server.url("nope.deb"), str(dest))
    assert str(exc.value) == f"download failed: {server.url('nope.deb')}: HTTP 404 Not Found"
    assert main([server.url("nope.deb"), str(dest)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HTTP 404 Not Found" in err and "Traceback" not in err
    assert not dest.exists() and not (tmp_path / "ucx.deb.part").exists()


def test_a_stalled_server_times_out_and_keeps_the_part_for_later(server, tmp_path):
    server.stall = 3.0
    dest = tmp_path / "ucx.deb"
    started = time.monotonic()
    with pytest.raises(DownloadError, match="after 2 tries; .*run again to resume"):
        download(server.url(), str(dest), timeout=0.3, attempts=2)
    assert time.monotonic() - started < 3.0 * 2
    assert not dest.exists()


def test_progress_is_whole_lines(tmp_path):
    import io

    out = io.StringIO()
    p = LineProgress(out)
    for got in range(0, 101, 5):
        p(got * 1048576, 100 * 1048576)
    lines = out.getvalue().splitlines()
    assert lines[0] == "downloaded 0.0 of 100.0 MiB (0%)" and lines[-1].endswith("(100%)")
    assert len(lines) == 11 and "\r" not in out.getvalue()


def test_module_command_line_as_the_recipe_runs_it(server, tmp_path):
    """`python3 -m hpcwizard.download URL FILE --sha256 "$want"` with $want empty or set."""
    dest = tmp_path / "ucx.deb"
    for want in ("", SHA.upper()):
        res = subprocess.run([sys.executable, "-m", "hpcwizard.download", server.url(), str(dest),
                              "--sha256", want], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert res.stdout == f"sha256 {SHA} ucx.deb\n"
        assert "downloaded" in res.stderr and "(100%)" in res.stderr
        dest.unlink()
    res = subprocess.run([sys.executable, "-m", "hpcwizard.download", "ftp://x/y.deb", str(dest)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.count("\n") == 1


# --- issue 13: nothing planted beside the file is written through --------------------------

@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "root-only"
    v.write_bytes(b"secret\n")
    v.chmod(0o600)
    return v


def test_a_planted_part_link_is_refused_not_written_through(server, tmp_path, victim):
    dest = tmp_path / "ucx.deb"
    (tmp_path / "ucx.deb.part").symlink_to(victim)
    with pytest.raises(DownloadError, match=r"ucx\.deb\.part is not a file of this user's"):
        download(server.url(), str(dest), SHA)
    assert victim.read_bytes() == b"secret\n" and (victim.stat().st_mode & 0o777) == 0o600
    assert server.requests == [] and not dest.exists()


def test_a_part_with_a_second_name_is_refused(server, tmp_path, victim):
    dest = tmp_path / "ucx.deb"
    os.link(victim, tmp_path / "ucx.deb.part")  # a hard link: the same file under our name
    with pytest.raises(DownloadError):
        download(server.url(), str(dest), SHA)
    assert victim.read_bytes() == b"secret\n"


def test_the_sha256_file_replaces_a_planted_link(server, tmp_path, victim):
    dest = tmp_path / "ucx.deb"
    (tmp_path / "ucx.deb.sha256").symlink_to(victim)
    assert download(server.url(), str(dest), SHA) == SHA
    side = tmp_path / "ucx.deb.sha256"
    assert not side.is_symlink() and side.read_text() == f"{SHA}  ucx.deb\n"
    assert victim.read_bytes() == b"secret\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_sizes_in_headers_are_ascii_digits_or_unknown():
    """A server's Content-Range / Content-Length in other digits is no size, not a crash."""
    from hpcwizard.download import _total_from

    class Resp:
        def __init__(self, headers):
            self.headers = headers

    assert _total_from(Resp({"Content-Range": "bytes 0-9/100"}), 0) == 100
    assert _total_from(Resp({"Content-Length": "40"}), 60) == 100
    assert _total_from(Resp({"Content-Range": "bytes 0-9/²"}), 0) is None
    assert _total_from(Resp({"Content-Length": "٢٢"}), 0) is None
