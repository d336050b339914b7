"""The forward recompute's parts, for any algorithm: a run's networks called in float64 on the tokens it sampled.

A trainer that feeds its models the wrong inputs (an attention mask over the pads, position ids
off, tokens replaced, logits at the wrong positions or scaled the wrong way by the temperature)
is consistent with itself, and every check that starts from its log-probs passes it. Here the
harness calls the networks themselves, the float64 CPU copies `observe()` took of the run's
`models` before training, with its own attention mask (every token but pad) and position ids
(the count of real tokens before each), on the row's real tokens: logits_t is the network's
output at the position before response token t, over the temperature, and
logp_t = log_softmax(logits_t)[y_t]. The query of a row is one of the run's `prompts`: the one
under which the policy's log-probs of the response match the trainer's (`match_prompts`), so the
prompts are not taken from the trainer's inputs. An algorithm's scenario says which log-probs
(rollout, reference, each micro-batch's) it holds to these (harness/algorithms/ppo/scenarios/forward.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from harness.errors import NotRecomputable


def model_inputs(sequences: torch.Tensor, pad: int) -> dict[str, torch.Tensor]:
    """The harness's own inputs: attend to every token but pad, positions counting the real tokens before each."""
    real = sequences != pad
    positions = (real.long().cumsum(dim=1) - 1).clamp(min=0)
    return {"input_ids": sequences, "attention_mask": real.long(), "position_ids": positions}


def response_logprobs(model, queries: torch.Tensor, responses: torch.Tensor, pad: int, temperature: float):
    """(B, T) float64 log-probs of each response token under `model`, given its query and the response before it."""
    sequences = torch.cat([queries, responses], dim=1)
    with torch.no_grad():
        logits = model(**model_inputs(sequences, pad), return_dict=True).logits.double()
    width, context = responses.shape[1], queries.shape[1]
    scaled = logits[:, context - 1 : context - 1 + width] / temperature
    return torch.log_softmax(scaled, dim=-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)


def response_distribution(model, queries: torch.Tensor, responses: torch.Tensor, pad: int, temperature: float):
    """(logp, entropy, variance), each (B, T) float64: at each response position, the log-prob of its token, the
    entropy H of softmax(logits / temperature) there, and Var[log p] under it (what `sampling` reads of a draw)."""
    sequences = torch.cat([queries, responses], dim=1)
    with torch.no_grad():
        logits = model(**model_inputs(sequences, pad), return_dict=True).logits.double()
    width, context = responses.shape[1], queries.shape[1]
    logs = torch.log_softmax(logits[:, context - 1 : context - 1 + width] / temperature, dim=-1)
    probs = logs.exp()
    entropy = -(probs * logs).sum(dim=-1)
    variance = (probs * (logs + entropy.unsqueeze(-1)) ** 2).sum(dim=-1)
    return logs.gather(-1, responses.unsqueeze(-1)).squeeze(-1), entropy, variance


def response_values(model, queries: torch.Tensor, responses: torch.Tensor, pad: int) -> torch.Tensor:
    """(B, T) float64 value-head outputs at each response position (read from the position before it).

    The value model is a transformers sequence-classification model: its backbone (`base_model_prefix`)
    and its scalar `score` head, applied per position.
    """
    backbone = getattr(model, getattr(model, "base_model_prefix", ""), None)
    head = getattr(model, "score", None)
    if backbone is None or head is None:
        raise NotRecomputable(
            f"the value model {type(model).__name__} has no backbone and `score` head to read per position"
        )
    sequences = torch.cat([queries, responses], dim=1)
    with torch.no_grad():
        hidden = backbone(**model_inputs(sequences, pad), return_dict=True).last_hidden_state
        values = head(hidden).double().squeeze(-1)
    width, context = responses.shape[1], queries.shape[1]
    return values[:, context - 1 : context - 1 + width]


def worst(gap: torch.Tensor, mask: torch.Tensor) -> tuple[float, int]:
    """The largest gap where `mask` is true (NaN counts as infinite), and its position; (0.0, -1) when none."""
    if not mask.any():
        return 0.0, -1
    gaps = torch.where(mask, gap.nan_to_num(nan=float("inf")), torch.zeros_like(gap))
    at = int(gaps.argmax())
    return float(gaps.flatten()[at]), at


def match_prompts(policy, prompts: torch.Tensor, responses: torch.Tensor, logprobs: torch.Tensor,
                  mask: torch.Tensor, pad: int, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """For each row, the prompt (index) whose policy log-probs of the row's response are nearest the trainer's
    on `mask`, and that nearest gap (largest over the row's positions); rows without a masked position get 0."""
    chosen, gaps = [], []
    for response, logged, row_mask in zip(responses, logprobs, mask):
        if not row_mask.any():
            chosen.append(0)
            gaps.append(0.0)
            continue
        batch = response.expand(len(prompts), -1)
        network = response_logprobs(policy, prompts, batch, pad, temperature)
        gap = (network - logged.double()).abs().nan_to_num(nan=float("inf"))
        per_prompt = torch.where(row_mask, gap, torch.zeros_like(gap)).amax(dim=1)
        best = int(per_prompt.argmin())
        chosen.append(best)
        gaps.append(float(per_prompt[best]))
    return torch.tensor(chosen, dtype=torch.long), torch.tensor(gaps, dtype=torch.float64)


def networks_of(ran, names: tuple[str, ...], what: str = "log-probs") -> tuple[Mapping, torch.Tensor]:
    """The run's pristine networks `names` and its prompts; NotRecomputable (saying `what` cannot be recomputed)
    when it exposed none."""
    networks, prompts = ran.networks, ran.prompts
    if networks is None or prompts is None:
        raise NotRecomputable(
            f"the run exposes no `models` ({', '.join(names)}) and `prompts` (docs/architecture.md), so the "
            f"network's own {what} cannot be recomputed"
        )
    missing = [name for name in names if name not in networks]
    if missing:
        raise NotRecomputable(f"the run's `models` lack {', '.join(missing)} (expected {', '.join(names)})")
    if prompts.dim() != 2 or not len(prompts):
        raise NotRecomputable(f"the run's `prompts` have shape {tuple(prompts.shape)}, expected (N, P) with N > 0")
    return networks, prompts


class Gaps:
    """The largest gap of each quantity over a run, and where it was."""

    def __init__(self) -> None:
        self.largest: dict[str, tuple[float, str]] = {}

    def add(self, quantity: str, gap: torch.Tensor, mask: torch.Tensor, where: str, rows: list[int]) -> None:
        """Keep the largest of `gap` on `mask` for `quantity` ((rows, T) tensors; `rows` names their rollout rows)."""
        value, at = worst(gap, mask)
        if at < 0:
            return
        row, position = divmod(at, gap.shape[1])
        label = f"{where}, rollout row {rows[row]} position {position}"
        if quantity not in self.largest or not value <= self.largest[quantity][0]:
            self.largest[quantity] = (value, label)
