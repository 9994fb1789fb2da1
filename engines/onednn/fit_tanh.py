"""Fits the constants of vmath::tanh (vmath.hpp) and prints them.

tanh(x) ~ x P(z) / Q(z), z = x^2, P(0) = Q(0) = 1, P of degree 4 and Q of degree 4 in z,
on 0 < x <= 9 (past 9, tanh rounds to 1 in float32 and the engine clamps x there). The
linearised problem x P(z) - tanh(x) Q(z) = 0 is solved by weighted least squares,
reweighted towards its largest relative errors (Lawson's iteration), so that the
relative error comes near its smallest maximum; the best iterate is kept. Prints both
polynomials' coefficients (lowest power first, the leading 1 omitted) and the largest
relative error over a dense float32 grid, in double and with P and Q evaluated in
float32 by Horner's rule without fused multiply-adds, as the engine's baseline loops
do (its AVX2 and AVX-512 loops fuse them: 3.3e-7 through the device on AVX2).

    python engines/onednn/fit_tanh.py    # needs numpy
"""
import numpy as np

LIMIT = 9.0
P_DEGREE, Q_DEGREE = 4, 4
X = np.concatenate([np.linspace(1e-4, 1, 4001), np.linspace(1, LIMIT, 8001)[1:]])


def fit(iters=300):
    t, z = np.tanh(X), X * X
    # unknowns p_1..p_P, q_1..q_Q of x (1 + sum p_k z^k) - t (1 + sum q_k z^k) = 0
    basis = np.concatenate([np.stack([X * z ** k for k in range(1, P_DEGREE + 1)], 1),
                            np.stack([-t * z ** k for k in range(1, Q_DEGREE + 1)], 1)], 1)
    lawson, best = np.ones_like(X), None
    for _ in range(iters):
        w = lawson / t  # relative error
        coef, *_ = np.linalg.lstsq(basis * w[:, None], (t - X) * w, rcond=None)
        p, q = coef[:P_DEGREE], coef[P_DEGREE:]
        err = np.abs(evaluate(p, q, X) - t) / t
        if best is None or err.max() < best[2]:
            best = (p, q, float(err.max()))
        lawson = lawson * np.sqrt(err / err.max()) + 1e-15
        lawson /= lawson.max()
    return best


def horner(coef, z):
    """1 + c_1 z + ... + c_n z^n, in z's dtype."""
    acc = np.full(z.shape, coef[-1], z.dtype)
    for c in coef[-2::-1]:
        acc = acc * z + z.dtype.type(c)
    return acc * z + z.dtype.type(1)


def evaluate(p, q, x):
    z = x * x
    return x * horner(p, z) / horner(q, z)


def float32_error(p, q):
    x = np.concatenate([np.linspace(0, LIMIT, 2_000_001, dtype=np.float32)[1:],
                        np.float32(2.0) ** -np.arange(1, 126, dtype=np.float32)])
    got = evaluate(p.astype(np.float32), q.astype(np.float32), x).astype(np.float64)
    want = np.tanh(x.astype(np.float64))
    rel = np.abs(got - want) / want
    ulps = np.abs(got - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
    return float(rel.max()), float(ulps.max())


if __name__ == "__main__":
    p, q, err = fit()
    rel, ulps = float32_error(p, q)
    print("P (z^1 first):", ", ".join(f"{float(np.float32(c)):.8e}" for c in p))
    print("Q (z^1 first):", ", ".join(f"{float(np.float32(c)):.8e}" for c in q))
    print(f"largest relative error: {err:.2g} in double, {rel:.2g} ({ulps:.1f} ulp) in float32")
