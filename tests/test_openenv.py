"""The gyms as OpenEnv environments: OpenEnv's own clients play whole episodes over loopback against
served gyms (travel through the ``eau openenv`` command, τ² airline and colbench with its sandbox
through the same app in this process) and get, turn by turn, the rewards the same actions get through
``eau play`` or the gym itself as ``eau play`` drives it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from extras_support import require

require("openenv", "openenv")

import uvicorn  # noqa: E402
from openenv.core import GenericEnvClient  # noqa: E402

from harness.agents.scripted import run_episode  # noqa: E402
from harness.envs.registry import make  # noqa: E402
from harness.gymserver.client import GymEnvClient  # noqa: E402
from harness.gymserver.environment import GymAction  # noqa: E402
from harness.gymserver.server import make_app  # noqa: E402
from harness.stores import open_store  # noqa: E402

EAU = shutil.which("eau")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, proc: subprocess.Popen | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the server exited: {proc.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"no server on port {port} after {timeout:.0f}s")


def oracle(gym: str, seed: int, knobs_dir: Path) -> dict[str, Any]:
    """The oracle's episode on the gym itself, reset as ``eau play`` resets it (seed, symbolic user).
    colbench has no oracle planner: a question, then the task's reference code as the answer."""
    env = make(gym, knobs=open_store(knobs_dir, events_path=None).snapshot(), rendering="tagged", split="train")
    options = {"arm": "symbolic", "split": "train"}
    if gym != "colbench":
        return run_episode(env, "oracle", seed, options)
    turns = iter(["ASK: What should the function return for an empty input?"])

    def ask_then_answer(e: Any) -> str:
        return next(turns, "I have what I need.\nANSWER:\n```python\n" + e.task.data["reference"] + "```")

    return run_episode(env, ask_then_answer, seed, options)


def play_remote(client: Any, seed: int, actions: list[str]) -> tuple[list[float], Any]:
    """Play ``actions`` through an OpenEnv client (dict actions for the generic client, typed for ours)."""
    typed = isinstance(client.async_client, GymEnvClient)
    result = client.reset(seed=seed)
    first = result.observation
    assert (first.role if typed else first["role"]) == "task" and result.done is False
    rewards = []
    for a in actions:
        result = client.step(GymAction(message=a) if typed else {"message": a})
        rewards.append(result.reward)
    assert result.done is True
    return rewards, result.observation


@pytest.fixture
def served(knobs_dir: Path) -> Iterator[Any]:
    """``serve(gym)``: the OpenEnv app of ``gym`` on a loopback port in this process; its base URL."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def serve(gym: str) -> str:
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(make_app(gym, knobs_dir), host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        wait_healthy(port)
        return f"http://127.0.0.1:{port}"

    yield serve
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.skipif(EAU is None, reason="the eau console script is not installed")
def test_openenv_client_plays_travel_served_by_eau_openenv_with_eau_plays_rewards(knobs_dir: Path):
    seed = 3
    record = oracle("travel", seed, knobs_dir)
    actions = [t["action"]["raw"] for t in record["turns"]]
    assert record["success"] and len(actions) >= 3 and all("\n" not in a for a in actions)

    port = free_port()
    server = subprocess.Popen(
        [EAU, "openenv", "travel", "--port", str(port), "--knobs-dir", str(knobs_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_healthy(port, server)
        with GenericEnvClient(base_url=f"http://127.0.0.1:{port}").sync() as client:
            rewards, last = play_remote(client, seed, actions)
            schema = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/schema", timeout=10))
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "message" in schema["action"]["properties"]

    played = subprocess.run(
        [EAU, "play", "travel", "--seed", str(seed), "--json", "--knobs-dir", str(knobs_dir)],
        input="\n".join(actions) + "\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert played.returncode == 0, played.stderr[-2000:]
    episode = json.loads(played.stdout)["episode"]
    assert rewards == [t["reward"] for t in episode["turns"]] == [t["reward"] for t in record["turns"]]
    assert last["episode"]["reward"] == episode["reward"] and last["success"] is True
    assert last["episode"]["task"] == episode["task"]


def test_openenv_client_plays_tau2_airline_with_the_gyms_rewards(served, knobs_dir: Path):
    require("tau2", "tau2")
    seed = 1
    record = oracle("tau2_airline", seed, knobs_dir)
    actions = [t["action"]["raw"] for t in record["turns"]]
    base = served("tau2_airline")
    with GymEnvClient(base_url=base).sync() as client:  # the typed client: a GymObservation back
        rewards, last = play_remote(client, seed, actions)
        state = client.state()
    assert rewards == [t["reward"] for t in record["turns"]]
    assert last.episode["reward"] == record["reward"] and last.success == record["success"]
    assert last.episode["task"]["task_id"] == record["task"]["task_id"]
    assert state.step_count == len(actions) and state.done and state.reward_total == pytest.approx(record["reward"])


def test_openenv_client_plays_colbench_scored_in_the_sandbox(served, knobs_dir: Path):
    seed = 2
    record = oracle("colbench", seed, knobs_dir)
    actions = [t["action"]["raw"] for t in record["turns"]]
    assert record["success"]  # the reference answer passes the task's tests, run in the sandbox
    base = served("colbench")
    with GenericEnvClient(base_url=base).sync() as client:
        rewards, last = play_remote(client, seed, actions)
    assert rewards == [t["reward"] for t in record["turns"]]
    answer = last["episode"]["turns"][-1]["answer"]
    assert answer["details"]["sandbox"] == record["turns"][-1]["answer"]["details"]["sandbox"]
    assert last["success"] is True and last["episode"]["reward"] == record["reward"]


def test_two_sessions_are_separate_episodes_and_a_step_after_the_end_is_refused(served):
    base = served("intention")
    with GenericEnvClient(base_url=base).sync() as a, GenericEnvClient(base_url=base).sync() as b:
        ra, rb = a.reset(seed=0), b.reset(seed=1)
        assert ra.observation["task_id"] != rb.observation["task_id"]
        done = a.step({"message": "ANSWER: a short formal note"})
        assert done.done is True and done.observation["episode"]["num_turns"] == 1
        with pytest.raises(Exception, match="reset first"):
            a.step({"message": "ASK: anything else?"})
        assert b.step({"message": "ASK: which tone?"}).done is False  # b's episode goes on


def test_the_readmes_trl_environment_class_plays_a_served_gym(served, knobs_dir: Path):
    """The README's ``EauGym`` (TRL's environment_factory form), run as written against a served gym:
    its reward is the gym's own for the same turns."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = next(b for b in readme.split("```python\n")[1:] if "class EauGym" in b).split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(compile(block, "README.md:EauGym", "exec"), scope)
    gym = scope["EauGym"](base_url=served("intention"))
    prompt = gym.reset(seed=4)
    turns = [("ask", "What tone should it have?"), ("ask", "Who is it for?"), ("answer", "A short formal note.")]
    replies = [gym.interact(choice, content) for choice, content in turns]
    assert gym.done and gym.interact("ask", "more?") == "The task is over."
    env = make("intention", knobs=open_store(knobs_dir, events_path=None).snapshot(), rendering="tagged")
    actions = iter(f"{choice.upper()}: {content}" for choice, content in turns)
    record = run_episode(env, lambda e: next(actions), 4, {"arm": "symbolic", "split": "train"})
    assert prompt.endswith(env.task.prompt)
    assert replies == [t["observation"] for t in record["turns"]]
    assert gym.get_reward() == pytest.approx(record["reward"])


def test_eau_openenv_names_a_bad_gym_option_or_knobs_folder(tmp_path: Path):
    from typer.testing import CliRunner

    from harness.cli.common import EXIT_INVALID, EXIT_NOT_FOUND, EXIT_USAGE
    from harness.cli.main import app

    runner = CliRunner()
    res = runner.invoke(app, ["openenv", "nosuchgym"])
    assert res.exit_code == EXIT_NOT_FOUND and "unknown gym 'nosuchgym'; known gyms:" in res.output
    res = runner.invoke(app, ["openenv", "travel", "--user", "robot"])
    assert res.exit_code == EXIT_USAGE and "--user 'robot' is not allowed" in res.output
    res = runner.invoke(app, ["openenv", "travel", "--user", "llm"])
    assert res.exit_code == EXIT_USAGE and "--llm-url URL --llm-model NAME" in res.output
    broken = tmp_path / "knobs"
    shutil.copytree(Path(__file__).resolve().parents[1] / "harness" / "knobs" / "defaults", broken)
    (broken / "env.yaml").write_text("max_steps: [not, a, number\n")
    res = runner.invoke(app, ["openenv", "travel", "--knobs-dir", str(broken)])
    assert res.exit_code == EXIT_INVALID and "env.yaml" in res.output


def test_eau_openenv_refuses_a_port_it_cannot_listen_on_instead_of_serving(tmp_path: Path):
    """The address is bound before the server starts: a taken port or an address that is not one ends
    the command with exit 1 naming it (it never starts serving, so it never hangs a caller)."""
    import socket

    from typer.testing import CliRunner

    from harness.cli.common import EXIT_ERROR, EXIT_USAGE
    from harness.cli.main import app

    runner = CliRunner()
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        res = runner.invoke(app, ["openenv", "travel", "--port", str(port)])
    assert res.exit_code == EXIT_ERROR and f"cannot listen on 127.0.0.1:{port}" in res.output
    res = runner.invoke(app, ["openenv", "travel", "--host", "256.0.0.1", "--port", "0"])
    assert res.exit_code == EXIT_ERROR and "cannot listen on 256.0.0.1:0" in res.output
    res = runner.invoke(app, ["openenv", "travel", "--port", "70000"])
    assert res.exit_code == EXIT_USAGE and "--port must be 0..65535, got 70000" in res.output
