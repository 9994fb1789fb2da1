"""Fits the constants of vmath::erfc_nonneg (vmath.hpp) and prints them.

erfc(z) ~ t * P(t) * exp(-z^2), t = 1 / (1 + p z), z >= 0, P of degree 4: for each p
on a grid, P is the weighted least-squares fit of erfcx(z) = exp(z^2) erfc(z),
reweighted towards its largest errors (Lawson's iteration) so that the absolute
error of erf = 1 - erfc is near its smallest maximum; the best p is kept. Prints
p, P's coefficients (lowest power first) and the largest absolute error of erf
over z in [0, 12], in double and with P evaluated in float32 as the engine does.

    python engines/onednn/fit_erfc.py    # needs numpy and scipy
"""
import numpy as np
from scipy.special import erfc, erfcx

Z = np.concatenate([np.linspace(0, 6, 6001), np.linspace(6, 12, 600)])
DEGREE = 4


def fit(p, iters=60):
    t = 1 / (1 + p * Z)
    basis = np.stack([t ** (k + 1) for k in range(DEGREE + 1)], 1)  # t * P(t)
    weight = np.exp(-Z * Z)  # an error in erfcx, times this, is an error in erf
    lawson = np.ones_like(Z)
    for _ in range(iters):
        w = weight * lawson
        coef, *_ = np.linalg.lstsq(basis * w[:, None], erfcx(Z) * w, rcond=None)
        err = np.abs(basis @ coef - erfcx(Z)) * weight
        lawson = lawson * np.sqrt(err / err.max()) + 1e-12
        lawson /= lawson.max()
    return coef, float(err.max())


def float32_error(p, coef):
    z = Z.astype(np.float32)
    t = np.float32(1) / (np.float32(1) + np.float32(p) * z)
    acc = np.full(z.shape, np.float32(coef[-1]), np.float32)
    for c in coef[-2::-1]:
        acc = acc * t + np.float32(c)
    approx = (acc * t).astype(np.float64) * np.exp(-z.astype(np.float64) ** 2)
    return float(np.max(np.abs(approx - erfc(z.astype(np.float64)))))


if __name__ == "__main__":
    best = min((fit(p) + (p,) for p in np.round(np.arange(0.30, 0.60, 0.002), 3)), key=lambda r: r[1])
    coef, err, p = best
    print(f"p = {p}")
    print("P (lowest power first):", ", ".join(f"{float(np.float32(c)):.8g}" for c in coef))
    print(f"largest |erf error|: {err:.2g} in double, {float32_error(p, coef):.2g} in float32")
