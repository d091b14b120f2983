"""Tokens per expert on one GPU of a mixture-of-experts layer, from a stated routing: what sizes its grouped GEMMs.

A layer routes ``tokens`` tokens to ``topk`` of ``experts`` experts each: R = tokens x topk routes. Expert
parallelism ``ep`` gives each GPU experts / ep consecutive experts (its *local* experts); a GPU's grouped GEMMs run
the routes that land on its local experts, one group per expert with tokens.

- **Balanced** (``skew`` 0): every expert gets R / experts routes (the round-robin assignment of aiconfigurator's
  ``balanced_logits``), so a GPU runs R / ep routes over min(experts / ep, ceil(R / ep)) experts, at most
  ceil(R / experts) on one.
- **Power law** (``skew`` = alpha > 0): aiconfigurator's collectors (``power_law_logits_v3``) draw each expert's
  weight from a bounded Pareto density p(x) ~ x^-alpha on [1, 0.8 tokens] (on [0.01, 2] when R <= experts) by the
  inverse CDF x = ((b^(1-a) - a0^(1-a)) u + a0^(1-a))^(1/(1-a)), u ~ U(0, 1), scale the weights to sum R, round
  and give the rounding's shortfall to the busiest experts (:func:`_to_sum`),
  and place the expert-parallel slice with the most routes on the measured GPU; a draw that gives one expert more
  routes than there are tokens (each token takes distinct experts) is redrawn. The expected counts of that
  busiest slice (its routes, its busiest expert, its experts with any route) are taken here as the mean over
  ``DRAWS`` draws of that same generator with a fixed seed: deterministic, and the order statistics of the heavy
  tail (the max of a Pareto sample has no simpler closed form once scaled to a fixed sum) come out right. A skew
  raises the busiest slice's routes and its busiest expert's m above the balanced figures.

The expected counts of a power-law draw are estimates (the collectors' rounding and tie-breaking at a few routes per
expert decide how many experts get any); :func:`least_loads` gives what any draw must at least cost the busiest GPU,
which is what a bound may use.

Vectorised over the distinct (tokens, experts, topk, ep, skew) of a frame: a table has a few thousand of them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

#: draws of the power-law generator averaged per distinct layer (spread of the mean < 2 % at 8 experts)
DRAWS = 32
#: draws made per kept one: a draw giving an expert more routes than there are tokens is redrawn (TensorRT-LLM's
#: ``power_law_logits_v4``), and where fewer than DRAWS of these are possible the rest are clipped at the tokens
REDRAWS = 4
#: the generator's fixed seed: the same counts on every call
SEED = 0


@dataclass(frozen=True)
class ExpertLoads:
    """Per row: routes the GPU runs, routes of its busiest expert, and its experts with at least one route."""

    local_routes: np.ndarray
    max_expert: np.ndarray
    active_experts: np.ndarray

    @property
    def mean_expert(self) -> np.ndarray:
        """Routes per expert with work: the m of an average group of the grouped GEMM."""
        return self.local_routes / np.maximum(self.active_experts, 1.0)


def _power_law_weights(rng: np.random.Generator, draws: int, experts: int, alpha: float, lo: float,
                       hi: float) -> np.ndarray:
    """(draws, experts) samples of the bounded Pareto density x^-alpha on [lo, hi] (inverse CDF)."""
    u = rng.random((draws, experts))
    if abs(alpha - 1.0) < 1e-9:
        return lo * (hi / lo) ** u
    e = 1.0 - alpha
    return ((hi ** e - lo ** e) * u + lo ** e) ** (1.0 / e)


def _to_sum(counts: np.ndarray, routes: float) -> np.ndarray:
    """Rounded counts made to sum to ``routes`` as the collectors do: a shortfall goes one route each to the
    experts with the most (cycling), an excess comes off those with the fewest that have any."""
    delta = int(routes - counts.sum())
    order = np.argsort(-counts, kind="stable")
    if delta > 0:
        np.add.at(counts, order[np.arange(delta) % len(counts)], 1.0)
    for _ in range(-delta):
        nonzero = np.flatnonzero(counts > 0)
        counts[nonzero[np.argmin(counts[nonzero])]] -= 1.0
    return counts


def power_law_counts(tokens: int, experts: int, topk: int, alpha: float, draws: int = DRAWS) -> np.ndarray:
    """(draws, experts) routes per expert of ``draws`` draws of the collectors' power-law generator (module
    docstring), each summing to tokens x topk with no expert above ``tokens``; the same on every call."""
    routes = tokens * topk
    lo, hi = (1.0, tokens * 0.8) if routes > experts else (0.01, 2.0)
    hi = max(hi, lo * (1.0 + 1e-6))
    weights = _power_law_weights(np.random.default_rng(SEED), REDRAWS * draws, experts, alpha, lo, hi)
    counts = np.array([_to_sum(row, routes) for row in np.round(weights / weights.sum(axis=1, keepdims=True)
                                                                  * routes)])
    possible = counts.max(axis=1) <= tokens  # a token takes top-k distinct experts: no expert gets more than tokens
    counts = counts[np.argsort(~possible, kind="stable")[:draws]]
    return np.minimum(counts, tokens)


@functools.lru_cache(maxsize=1 << 16)
def _skewed(tokens: int, experts: int, topk: int, ep: int, alpha: float) -> tuple[float, float, float]:
    counts = power_law_counts(tokens, experts, topk, alpha)
    slices = counts.reshape(DRAWS, ep, experts // ep)
    busiest = slices[np.arange(DRAWS), slices.sum(axis=2).argmax(axis=1)]  # (draws, local experts)
    return float(busiest.sum(axis=1).mean()), float(busiest.max(axis=1).mean()), float((busiest > 0).sum(1).mean())


def expert_loads(tokens: np.ndarray, experts: np.ndarray, topk: np.ndarray, ep: np.ndarray,
                 skew: np.ndarray) -> ExpertLoads:
    """Tokens per expert on the measured GPU of each row (see the module docstring for the formulas)."""
    tokens, experts, topk, ep, skew = (np.asarray(a, dtype=np.float64) for a in (tokens, experts, topk, ep, skew))
    if np.any(experts % ep):
        raise ValueError("moe routing: experts must be a multiple of ep")
    routes = tokens * topk
    local = experts / ep
    out = [routes / ep, np.maximum(np.ceil(routes / experts), 1.0), np.minimum(local, np.ceil(routes / ep))]
    skewed = skew > 0
    if skewed.any():
        keys = np.stack([tokens, experts, topk, ep, skew], axis=1)[skewed]
        distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
        figures = np.array([_skewed(int(t), int(e), int(k), int(p), float(a)) for t, e, k, p, a in distinct])
        for i in range(3):
            out[i] = out[i].copy()
            out[i][skewed] = figures[inverse.ravel(), i]
    return ExpertLoads(*out)


def least_loads(tokens: np.ndarray, experts: np.ndarray, topk: np.ndarray, ep: np.ndarray, skew: np.ndarray,
                expected: ExpertLoads) -> ExpertLoads:
    """The least work a routing can give the busiest GPU: for a skewed row, the mean routes per GPU (the busiest
    has at least that many) on the fewest experts that can hold them (no expert takes more routes than there are
    tokens), so the fewest weights read; a balanced row's loads are exact and kept."""
    tokens, experts, topk, ep, skew = (np.asarray(a, dtype=np.float64) for a in (tokens, experts, topk, ep, skew))
    routes = tokens * topk / ep
    active = np.minimum(np.maximum(np.ceil(routes / tokens), 1.0), experts / ep)
    skewed = skew > 0
    return ExpertLoads(np.where(skewed, routes, expected.local_routes),
                       np.where(skewed, routes / active, expected.max_expert),
                       np.where(skewed, active, expected.active_experts))
