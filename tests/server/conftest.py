"""Starts `lctx serve` for the server tests: the real binary on 127.0.0.1, a
free port (--port 0; the port is read from its start line), the default model."""
import os
import pathlib
import re
import subprocess
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LCTX_BUILD_DIR", ROOT / "build" / "release"))
MODELS = pathlib.Path(os.environ.get("LCTX_MODELS_DIR", ROOT / "models"))
SMOLLM2 = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


class Server:
    """A running `lctx serve`; its stderr is collected in `log`."""

    def __init__(self, args):
        cli = BUILD / "tools" / "lctx"
        if not cli.exists():
            pytest.fail(f"the lctx CLI is missing at {cli} (build first)", pytrace=False)
        if not SMOLLM2.exists():
            pytest.fail(f"model missing: {SMOLLM2} (run scripts/fetch-models.sh)", pytrace=False)
        self.log = []
        self.proc = subprocess.Popen([str(cli), "serve", "-m", str(SMOLLM2), "--host", "127.0.0.1", "--port", "0",
                                      *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        port = []
        started = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))
                m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
                if m and not port:
                    port.append(int(m.group(1)))
                    started.set()
            started.set()

        self.reader = threading.Thread(target=drain, daemon=True)
        self.reader.start()
        if not started.wait(120) or not port:
            self.proc.kill()
            pytest.fail("lctx serve did not start:\n" + "\n".join(self.log), pytrace=False)
        self.port = port[0]
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self, timeout=30):
        """SIGTERM; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("serve-data")
    # Two slots (CI has two cores; the document's encoding takes both), a
    # short wait line, a 2 MB body limit for the oversized-body test.
    s = Server(["--parallel", "2", "--queue", "8", "--threads", "2", "--max-body", "2000000",
                "--timeout", "170", "--data-dir", str(data)])
    s.data_dir = data
    yield s
    rc = s.stop()
    assert rc == 0, "\n".join(s.log[-30:])
    time.sleep(0.1)
