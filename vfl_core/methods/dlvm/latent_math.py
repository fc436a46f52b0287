"""The math of the latent-variable VFL (DLVM-VFL, Hong, Park, Hwang, arXiv 2505.11035).

Generative model, for one sample with feature blocks x_1..x_K and label y:

    z ~ N(0, I),   h | z ~ p(h | z),   x_k | h ~ p(x_k | h) for each block,   y | h ~ p(y | h)

(the MNAR variant adds m_k | h ~ Bernoulli: whether party k holds the sample). Party k owns an
encoder giving a Gaussian expert q_k(h | x_k) = N(mu_k, diag(var_k)) and the decoder p(x_k | h);
the active party owns q(z | h), p(h | z) and p(y | h).

Posterior over h for the observed blocks O, the paper's Eq. (1): the mean is the plain average of
the observed experts' means and the precisions add,

    q(h | x_O) = N( (1/|O|) sum_{k in O} mu_k, (sum_{k in O} Sigma_k^-1)^-1 );

a missing block drops out of both (App. B.1: averaging keeps the mean's scale whatever the
number of missing parties). `product_of_experts` (DlvmConfig.posterior "product", not the
paper's) weights the means by precision instead, the exact product of the Gaussians.

Stage 1 maximises the importance-weighted bound (IWAE) with kappa samples over every sample,
labelled or not:

    log p(x_O) >= E[ log (1/kappa) sum_i w_i ],
    w_i = p(z_i) p(h_i | z_i) prod_{k in O} p(x_k | h_i) / (q(h_i | x_O) q(z_i | h_i)).

Prediction is self-normalised importance sampling with the same weights:
p(y | x_O) ~= sum_l w_l p(y | h_l) / sum_l w_l.

Everything here is plain tensor math: no parties, no transport.
"""

from __future__ import annotations

import math

import torch

LOG_2PI = math.log(2.0 * math.pi)
LOGVAR_MIN, LOGVAR_MAX = -8.0, 8.0  # keeps precisions finite whatever a network outputs


def clamp_logvar(logvar: torch.Tensor) -> torch.Tensor:
    return logvar.clamp(LOGVAR_MIN, LOGVAR_MAX)


def product_of_experts(
    means: list[torch.Tensor], logvars: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian experts (B, d) each -> their product (mean, log-variance), (B, d) each.

    Precisions add; the mean is the precision-weighted average. The experts are summed in the
    order given (callers pass them by block), so the result is reproducible bit for bit."""
    if not means or len(means) != len(logvars):
        raise ValueError("product_of_experts needs one log-variance per mean, at least one")
    precisions = [torch.exp(-clamp_logvar(lv)) for lv in logvars]  # (B, d) each
    total = precisions[0]
    weighted = precisions[0] * means[0]
    for mean, precision in zip(means[1:], precisions[1:], strict=True):
        total = total + precision
        weighted = weighted + precision * mean
    return weighted / total, -torch.log(total)


def mean_of_experts(
    means: list[torch.Tensor], logvars: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's Eq. (1): experts (B, d) each -> (mean, log-variance), (B, d) each.

    The mean is the unweighted average of the means; the precisions add, as in the product.
    Summed in the order given (callers pass them by block): reproducible bit for bit."""
    if not means or len(means) != len(logvars):
        raise ValueError("mean_of_experts needs one log-variance per mean, at least one")
    total = torch.exp(-clamp_logvar(logvars[0]))  # (B, d)
    summed = means[0]
    for mean, logvar in zip(means[1:], logvars[1:], strict=True):
        total = total + torch.exp(-clamp_logvar(logvar))
        summed = summed + mean
    return summed / len(means), -torch.log(total)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """log N(x; mean, diag(exp(logvar))) summed over the last dimension (broadcasting)."""
    return -0.5 * (LOG_2PI + logvar + (x - mean) ** 2 * torch.exp(-logvar)).sum(dim=-1)


def standard_normal_log_prob(x: torch.Tensor) -> torch.Tensor:
    return -0.5 * (LOG_2PI + x**2).sum(dim=-1)


def bernoulli_log_prob(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """sum_j x_j log sigmoid(l_j) + (1 - x_j) log sigmoid(-l_j), over the last dimension; x may
    lie anywhere in [0, 1] (pixel intensities)."""
    return (x * torch.nn.functional.logsigmoid(logits)).sum(-1) + (
        (1.0 - x) * torch.nn.functional.logsigmoid(-logits)
    ).sum(-1)


def reparameterise(mean: torch.Tensor, logvar: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Samples mean + sigma * noise: mean, logvar (B, d), noise (B, S, d) -> (B, S, d)."""
    return mean.unsqueeze(1) + torch.exp(0.5 * logvar).unsqueeze(1) * noise


def iwae_bound(log_weights: torch.Tensor) -> torch.Tensor:
    """Per-sample importance-weighted bound: log (1/S) sum_i exp(log_w_i); (B, S) -> (B,)."""
    return torch.logsumexp(log_weights, dim=1) - math.log(log_weights.shape[1])


def snis(log_weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Self-normalised importance sampling: sum_l w_l v_l / sum_l w_l.

    log_weights (B, L), values (B, L, C) -> (B, C)."""
    normalised = torch.softmax(log_weights, dim=1)  # (B, L)
    return (normalised.unsqueeze(-1) * values).sum(dim=1)


def linearised(value: torch.Tensor, grad: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """A term computed elsewhere as a function of h, re-attached to h's graph to first order:
    its value is ``value`` (B, S) and its gradient with respect to h (B, S, d) is ``grad``.

    A party returns log p(x_k | h_i) and its gradient in h_i; each depends on its own h_i only,
    so this surrogate gives the active party exactly the gradient the joint graph would."""
    return value + ((h - h.detach()) * grad).sum(dim=-1)
