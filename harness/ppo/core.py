"""PPO as small pure functions over tensors and masks.

Conventions (shared with :mod:`harness.ppo.models`):

* Every per-token tensor is ``(B, T)`` and aligned with ``input_ids``: position ``t`` scores token
  ``t`` (``logprobs[:, t] = log pi(x_t | x_<t)``, ``values[:, t] = V(x_<t)``, the value of the state
  in which token ``t`` is chosen).
* ``action_mask`` is 1 on tokens the policy generated and 0 on prompt, observation and padding
  tokens. Losses, KL and entropy are taken over action tokens only.
* A turn is a maximal run of consecutive action tokens (or is delimited by an explicit
  ``turn_end_mask``); its reward sits on its last action token.

Registries: advantage estimators (``"gae"``, ``"reinforce"``) and KL estimators (``"k1"``, ``"k2"``,
``"k3"``) are looked up by name with :func:`get_adv_estimator` / :func:`get_kl_estimator`; a bad name
raises a ``ValueError`` that lists the valid ones. Losses return ``(loss, metrics)`` with metric keys
namespaced ``actor/...`` or ``critic/...``.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch

# ----------------------------------------------------------------------------------------------------
# masked reductions
# ----------------------------------------------------------------------------------------------------


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is 1 (over ``dim``, or everything).

    >>> masked_sum(torch.tensor([[1., 2., 3.]]), torch.tensor([[1, 0, 1]]))
    tensor(4.)
    """
    prod = x * mask
    return prod.sum() if dim is None else prod.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1; 0 where the mask is empty (never NaN).

    >>> masked_mean(torch.tensor([[1., 2., 3.]]), torch.tensor([[1, 0, 1]]))
    tensor(2.)
    """
    mask = mask.to(x.dtype)
    if dim is None:
        return masked_sum(x, mask) / mask.sum().clamp(min=1.0)
    return masked_sum(x, mask, dim) / mask.sum(dim).clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over masked positions (Bessel-corrected when ``unbiased`` and count > 1).

    >>> masked_var(torch.tensor([1., 2., 3., 100.]), torch.tensor([1, 1, 1, 0]))
    tensor(1.)
    """
    mask = mask.to(x.dtype)
    mean = masked_mean(x, mask)
    var = masked_sum((x - mean) ** 2, mask)
    count = mask.sum()
    if unbiased and count > 1:
        return var / (count - 1)
    return var / count.clamp(min=1.0)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """Normalise ``x`` to zero mean and unit variance over masked positions; 0 elsewhere.

    Used for advantage whitening over action tokens (a separate call after the estimator, so the
    estimator's returns are untouched). With ``shift_mean=False`` only the scale changes.

    >>> masked_whiten(torch.tensor([[1., 2., 3., 50.]]), torch.tensor([[1, 1, 1, 0]]))
    tensor([[-1.,  0.,  1.,  0.]])
    """
    mask = mask.to(x.dtype)
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask


def masked_sums(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[sum, sum of squares, count]`` of ``x`` over masked positions: additive, so data-parallel
    processes can sum theirs before :func:`moments_from_sums`.

    >>> masked_sums(torch.tensor([[1., 2., 3., 50.]]), torch.tensor([[1, 1, 1, 0]]))
    tensor([ 6., 14.,  3.])
    """
    m = mask.to(x.dtype)
    return torch.stack([(x * m).sum(), (x * x * m).sum(), m.sum()])


def moments_from_sums(sums: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, variance)`` from :func:`masked_sums` (the population variance; 0 for no positions).

    >>> moments_from_sums(torch.tensor([6., 14., 3.]))
    (tensor(2.), tensor(0.6667))
    """
    n = sums[2].clamp(min=1)
    mean = sums[0] / n
    return mean, (sums[1] / n - mean**2).clamp(min=0)


def whiten(
    x: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, eps: float = 1e-8
) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` at masked positions, 0 elsewhere (advantage whitening with moments
    taken over every process's action tokens).

    >>> whiten(torch.tensor([[1., 3., 9.]]), torch.tensor([[1, 1, 0]]), torch.tensor(2.), torch.tensor(1.))
    tensor([[-1.,  1.,  0.]])
    """
    return (x - mean) / (var.sqrt() + eps) * mask.to(x.dtype)


# ----------------------------------------------------------------------------------------------------
# loss aggregation
# ----------------------------------------------------------------------------------------------------

AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")


def agg_loss(
    loss_mat: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean", denom: float | torch.Tensor | None = None
) -> torch.Tensor:
    """Reduce a per-token loss ``(B, T)`` to a scalar over masked tokens.

    Modes:
      * ``token-mean``: every action token weighs the same (long episodes weigh more).
      * ``seq-mean-token-sum``: sum over each sequence's tokens, then mean over sequences.
      * ``seq-mean-token-mean``: mean over each sequence's tokens, then mean over sequences
        (every episode weighs the same whatever its length).

    Sequences without any masked token are left out of the sequence means. ``denom`` replaces the
    final divisor (the token count for ``token-mean``, the sequence count otherwise): pass the
    mini-batch's total when the loss of each micro-batch is accumulated, so the accumulated
    gradient equals the mini-batch gradient.

    >>> loss = torch.tensor([[1., 3., 0.], [5., 0., 0.]]); m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    >>> agg_loss(loss, m, "token-mean"), agg_loss(loss, m, "seq-mean-token-sum"), agg_loss(loss, m, "seq-mean-token-mean")
    (tensor(3.), tensor(4.5000), tensor(3.5000))
    """
    mask = mask.to(loss_mat.dtype)
    if denom is None:  # also checks the mode
        denom = agg_denominator(mask, mode).to(loss_mat.dtype).clamp(min=1.0)
    if mode == "token-mean":
        return masked_sum(loss_mat, mask) / denom
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; valid: {', '.join(AGG_MODES)}")
    tokens = mask.sum(-1)  # (B,)
    seq = masked_sum(loss_mat, mask, dim=-1)  # (B,)
    if mode == "seq-mean-token-mean":
        seq = seq / tokens.clamp(min=1.0)
    present = (tokens > 0).to(loss_mat.dtype)
    return (seq * present).sum() / denom


def agg_denominator(mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """The divisor :func:`agg_loss` uses for ``mask`` in ``mode``: the masked tokens for
    ``token-mean``, the sequences holding any masked token otherwise. Computed over a whole
    mini-batch (and summed over processes), it is the ``denom`` under which the micro-batches'
    accumulated losses add up to the mini-batch's loss.

    >>> m = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    >>> agg_denominator(m, "token-mean"), agg_denominator(m, "seq-mean-token-mean")
    (tensor(3.), tensor(2.))
    """
    mask = mask.float()
    if mode == "token-mean":
        return mask.sum()
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; valid: {', '.join(AGG_MODES)}")
    return (mask.sum(-1) > 0).float().sum()


# ----------------------------------------------------------------------------------------------------
# advantage estimators
# ----------------------------------------------------------------------------------------------------


class AdvEstimator(Protocol):
    """Signature every registered advantage estimator shares (see :func:`gae_advantages`). Rows are
    independent episodes: a row's outputs depend on that row's inputs only (the trainer may estimate a
    subset of rows, e.g. the update's first mini-batch, before the rest)."""

    def __call__(
        self,
        rewards: torch.Tensor,
        values: torch.Tensor,
        action_mask: torch.Tensor,
        *,
        gamma: float = 1.0,
        lam: float = 1.0,
        token_gamma: float = 1.0,
        token_lam: float = 1.0,
        turn_end_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


ADV_ESTIMATORS: dict[str, AdvEstimator] = {}


def register_adv_est(name: str) -> Callable[[AdvEstimator], AdvEstimator]:
    """Decorator registering an advantage estimator under ``name`` (names are unique)."""

    def deco(fn: AdvEstimator) -> AdvEstimator:
        if name in ADV_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADV_ESTIMATORS[name] = fn
        return fn

    return deco


def get_adv_estimator(name: str) -> AdvEstimator:
    """The advantage estimator registered as ``name``; ValueError listing the valid names otherwise."""
    try:
        return ADV_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; valid: {', '.join(sorted(ADV_ESTIMATORS))}") from None


def turn_ends(action_mask: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` mask of the last token of each run of consecutive action tokens.

    >>> turn_ends(torch.tensor([[0, 1, 1, 0, 0, 1, 1]]))
    tensor([[0, 0, 1, 0, 0, 0, 1]])
    """
    m = action_mask.long()
    nxt = torch.zeros_like(m)
    nxt[:, :-1] = m[:, 1:]
    return m * (1 - nxt)


def _check_adv_inputs(
    rewards: torch.Tensor, values: torch.Tensor, action_mask: torch.Tensor, turn_end_mask: torch.Tensor | None
) -> torch.Tensor:
    """Validate shapes; return the turn-end mask (derived from ``action_mask`` when not given)."""
    if rewards.dim() != 2 or rewards.shape != values.shape or rewards.shape != action_mask.shape:
        raise ValueError(
            "rewards, values and action_mask must all be (B, T); got "
            f"{tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(action_mask.shape)}"
        )
    if turn_end_mask is None:
        return turn_ends(action_mask)
    if turn_end_mask.shape != action_mask.shape:
        raise ValueError(f"turn_end_mask must be (B, T) like action_mask; got {tuple(turn_end_mask.shape)}")
    if bool(((turn_end_mask != 0) & (action_mask == 0)).any()):
        raise ValueError("turn_end_mask marks a token that is not an action token (action_mask == 0)")
    return turn_end_mask.long()


@register_adv_est("gae")
@torch.no_grad()
def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    token_gamma: float = 1.0,
    token_lam: float = 1.0,
    turn_end_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-turn GAE over action tokens only.

    Args:
        rewards: ``(B, T)``; each turn's reward on the turn's last action token. Rewards on
            non-action tokens are ignored.
        values: ``(B, T)`` critic values ``V(x_<t)``; values on non-action tokens are ignored.
        action_mask: ``(B, T)``, 1 on tokens the policy generated.
        gamma, lam: discount and lambda from the last action token of a turn to the first action
            token of the next turn.
        token_gamma, token_lam: discount and lambda between consecutive action tokens of one turn
            (1/1 keeps a turn's credit whole).
        turn_end_mask: ``(B, T)``, 1 on each turn's last action token; derived from
            ``action_mask`` (end of each run of action tokens) when None.

    Returns:
        ``(advantages, returns)``, both ``(B, T)`` and 0 on non-action tokens;
        ``returns = advantages + values`` on action tokens (the critic's regression target).

    Observation tokens are skipped: walking backwards, ``nextvalue`` and ``lastgaelam`` are carried
    unchanged across every non-action token (``next = v * m + (1 - m) * next``), so the next action
    token's value bootstraps the previous action token directly. The episode ends after its last
    action token (value 0 beyond it).

    >>> r = torch.tensor([[0., 0., 1., 0., 0., 2.]]); m = torch.tensor([[0, 1, 1, 0, 1, 1]])
    >>> gae_advantages(r, torch.zeros(1, 6), m)[0]
    tensor([[0., 3., 3., 0., 2., 2.]])
    """
    ends = _check_adv_inputs(rewards, values, action_mask, turn_end_mask)
    B, T = rewards.shape
    m = action_mask.to(values.dtype)
    e = ends.to(values.dtype)
    next_value = torch.zeros(B, dtype=values.dtype, device=values.device)
    last_gae = torch.zeros_like(next_value)
    adv = torch.zeros_like(values)
    for t in reversed(range(T)):
        # Across a turn boundary use (gamma, lam); inside a turn (token_gamma, token_lam).
        g = e[:, t] * gamma + (1 - e[:, t]) * token_gamma
        lam_t = e[:, t] * lam + (1 - e[:, t]) * token_lam
        delta = rewards[:, t] + g * next_value - values[:, t]
        gae_t = delta + g * lam_t * last_gae
        # Non-action tokens carry the running quantities through untouched.
        next_value = values[:, t] * m[:, t] + (1 - m[:, t]) * next_value
        last_gae = gae_t * m[:, t] + (1 - m[:, t]) * last_gae
        adv[:, t] = gae_t * m[:, t]
    returns = (adv + values) * m
    return adv, returns


@register_adv_est("reinforce")
@torch.no_grad()
def reinforce_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    token_gamma: float = 1.0,
    token_lam: float = 1.0,
    turn_end_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Critic-free discounted return-to-go over action tokens (REINFORCE without baseline).

    Same signature and conventions as :func:`gae_advantages`; ``values`` and the lambdas are
    unused (kept so estimators are interchangeable). ``advantages == returns``, 0 on non-action
    tokens. Equivalent to GAE with zero values and lambdas of 1.

    >>> r = torch.tensor([[0., 1., 0., 2.]]); m = torch.tensor([[1, 1, 0, 1]])
    >>> reinforce_advantages(r, torch.zeros(1, 4), m, gamma=0.5)[0]
    tensor([[2., 2., 0., 2.]])
    """
    return gae_advantages(
        rewards,
        torch.zeros_like(values),
        action_mask,
        gamma=gamma,
        lam=1.0,
        token_gamma=token_gamma,
        token_lam=1.0,
        turn_end_mask=turn_end_mask,
    )


# ----------------------------------------------------------------------------------------------------
# KL estimators
# ----------------------------------------------------------------------------------------------------

KLEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: dict[str, KLEstimator] = {}
# exp() of a log-ratio beyond this overflows float16/bfloat16 long before it means anything.
_LOG_RATIO_CLAMP = 20.0


def register_kl_est(name: str) -> Callable[[KLEstimator], KLEstimator]:
    """Decorator registering a per-token KL estimator ``(logprobs, ref_logprobs) -> (B, T)``."""

    def deco(fn: KLEstimator) -> KLEstimator:
        if name in KL_ESTIMATORS:
            raise ValueError(f"KL estimator {name!r} is already registered")
        KL_ESTIMATORS[name] = fn
        return fn

    return deco


def get_kl_estimator(name: str) -> KLEstimator:
    """The KL estimator registered as ``name``; ValueError listing the valid names otherwise."""
    try:
        return KL_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown KL estimator {name!r}; valid: {', '.join(sorted(KL_ESTIMATORS))}") from None


@register_kl_est("k1")
def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = log pi - log pi_ref: unbiased for KL(pi || ref) under samples of pi, can be negative."""
    return logprobs - ref_logprobs


@register_kl_est("k2")
def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 * (log pi - log pi_ref)^2: non-negative, low variance, biased."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


@register_kl_est("k3")
def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = r - 1 - log r with r = pi_ref / pi: unbiased and non-negative (Schulman's estimator)."""
    log_r = (ref_logprobs - logprobs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return torch.exp(log_r) - 1 - log_r


def kl_penalty(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Per-token KL to the reference, ``(B, T)``, 0 where ``mask`` is 0.

    >>> lp, ref = torch.tensor([[0.0, -1.0]]), torch.tensor([[-1.0, -1.0]])
    >>> kl_penalty(lp, ref, torch.tensor([[1, 1]]), "k1")
    tensor([[1., 0.]])
    """
    return get_kl_estimator(estimator)(logprobs, ref_logprobs) * mask.to(logprobs.dtype)


# ----------------------------------------------------------------------------------------------------
# losses
# ----------------------------------------------------------------------------------------------------

Metrics = dict[str, float]


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg_mode: str = "token-mean",
    denom: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """PPO clipped surrogate with decoupled clip range ``[1 - clip_low, 1 + clip_high]``.

    All inputs ``(B, T)``. Per token: ``max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))``
    with ``r = exp(logprobs - old_logprobs)``, aggregated with :func:`agg_loss`.

    Metrics: ``actor/pg_loss``, ``actor/clip_frac`` (share of action tokens where the clipped term
    was the larger one, i.e. whose gradient is cut), ``actor/approx_kl`` (mean of
    ``(r - 1) - log r`` between old and new policy, non-negative), ``actor/ratio_mean``,
    ``actor/ratio_min``, ``actor/ratio_max``.
    """
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip ranges must be >= 0; got clip_low={clip_low}, clip_high={clip_high}")
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_mat = torch.maximum(pg1, pg2)
    loss = agg_loss(pg_mat, mask, agg_mode, denom)
    with torch.no_grad():
        fmask = mask.to(ratio.dtype)
        any_tok = bool(fmask.sum() > 0)
        metrics = {
            "actor/pg_loss": float(loss.detach()),
            "actor/clip_frac": float(masked_mean((pg2 > pg1).to(ratio.dtype), fmask)),
            "actor/approx_kl": float(masked_mean((ratio - 1) - log_ratio, fmask)),
            "actor/ratio_mean": float(masked_mean(ratio, fmask)),
            "actor/ratio_min": float(ratio[fmask > 0].min()) if any_tok else 1.0,
            "actor/ratio_max": float(ratio[fmask > 0].max()) if any_tok else 1.0,
        }
    return loss, metrics


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    value_clip: float = 0.2,
    agg_mode: str = "token-mean",
    denom: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """Clipped value loss ``0.5 * max((V - R)^2, (V_clip - R)^2)``, ``V_clip`` within
    ``old_values +- value_clip``; ``value_clip == 0`` disables clipping (plain ``0.5 * (V - R)^2``).

    All inputs ``(B, T)``. Metrics: ``critic/vf_loss``, ``critic/vf_clip_frac``,
    ``critic/vpred_mean``, ``critic/explained_var`` (``1 - Var(R - V) / Var(R)`` over action tokens).
    """
    if value_clip < 0:
        raise ValueError(f"value_clip must be >= 0 (0 disables clipping); got {value_clip}")
    vf1 = (values - returns) ** 2
    if value_clip > 0:
        clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
        vf2 = (clipped - returns) ** 2
        vf_mat = torch.maximum(vf1, vf2)
    else:
        vf2 = vf1
        vf_mat = vf1
    loss = 0.5 * agg_loss(vf_mat, mask, agg_mode, denom)
    with torch.no_grad():
        fmask = mask.to(values.dtype)
        var_r = masked_var(returns, fmask)
        metrics = {
            "critic/vf_loss": float(loss.detach()),
            "critic/vf_clip_frac": float(masked_mean((vf2 > vf1).to(values.dtype), fmask)),
            "critic/vpred_mean": float(masked_mean(values, fmask)),
            "critic/explained_var": float(1 - masked_var(returns - values, fmask) / var_r) if var_r > 0 else 0.0,
        }
    return loss, metrics


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    estimator: str = "k3",
    agg_mode: str = "token-mean",
    denom: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """KL-to-reference term over action tokens (all inputs ``(B, T)``). Metric: ``actor/kl``."""
    kl_mat = kl_penalty(logprobs, ref_logprobs, mask, estimator)
    loss = agg_loss(kl_mat, mask, agg_mode, denom)
    return loss, {"actor/kl": float(loss.detach())}


def entropy_bonus(
    entropy: torch.Tensor, mask: torch.Tensor, agg_mode: str = "token-mean", denom: float | torch.Tensor | None = None
) -> tuple[torch.Tensor, Metrics]:
    """Aggregated policy entropy over action tokens (``entropy (B, T)``). Metric: ``actor/entropy``."""
    ent = agg_loss(entropy, mask, agg_mode, denom)
    return ent, {"actor/entropy": float(ent.detach())}


def ppo_actor_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    entropy: torch.Tensor | None = None,
    entropy_coeff: float = 0.0,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    agg_mode: str = "token-mean",
    denom: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """The policy objective: ``pg_loss - entropy_coeff * entropy + kl_coef * kl``.

    All tensors ``(B, T)``. ``entropy`` is required when ``entropy_coeff > 0`` and ``ref_logprobs``
    when ``kl_coef > 0``; each is still measured (not weighted) when given with a zero coefficient.
    Metrics: those of :func:`policy_loss`, ``actor/entropy``, ``actor/kl`` (when available) and
    ``actor/loss`` (the total).
    """
    if entropy_coeff > 0 and entropy is None:
        raise ValueError("entropy_coeff > 0 needs per-token entropy; pass entropy=")
    if kl_coef > 0 and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs reference log-probs; pass ref_logprobs=")
    pg, metrics = policy_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high, agg_mode, denom)
    ent_term = torch.zeros((), dtype=pg.dtype, device=pg.device)
    kl_term = torch.zeros_like(ent_term)
    if entropy is not None:
        ent_term, m = entropy_bonus(entropy, mask, agg_mode, denom)
        metrics.update(m)
    if ref_logprobs is not None:
        kl_term, m = kl_loss(logprobs, ref_logprobs, mask, kl_estimator, agg_mode, denom)
        metrics.update(m)
    loss = pg - entropy_coeff * ent_term + kl_coef * kl_term
    metrics["actor/loss"] = float(loss.detach())
    return loss, metrics


# ----------------------------------------------------------------------------------------------------
# learning-rate schedule
# ----------------------------------------------------------------------------------------------------


def warmup_factor(updates_done: int, warmup_updates: int) -> float:
    """Linear learning-rate warm-up: the factor on the learning rate of the optimiser update that
    follows ``updates_done`` earlier ones, ``(updates_done + 1) / warmup_updates`` capped at 1.

    Adam's first updates move every weight by about the learning rate whatever its gradient's size
    (its second-moment estimate has seen one gradient), so without a warm-up the very first update is
    the largest one.

    >>> [warmup_factor(n, 4) for n in range(5)], warmup_factor(0, 0)
    ([0.25, 0.5, 0.75, 1.0, 1.0], 1.0)
    """
    if warmup_updates <= 0:
        return 1.0
    return min(1.0, (max(0, updates_done) + 1) / warmup_updates)
