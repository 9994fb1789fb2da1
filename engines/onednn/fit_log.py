"""Fits the constants of vmath::log (vmath.hpp) and prints them.

log(x) = e ln 2 + log(1 + f), x = 2^e (1 + f), 1 + f in [sqrt(1/2), sqrt(2)); and
log(1 + f) ~ f - f^2 / 2 + f^3 P(f), P of degree DEGREE. P is fitted to
(log1p(f) - f + f^2 / 2) / f^3 by least squares weighted towards the largest
relative errors of log1p (Lawson's iteration); the best iterate is kept. Prints P's
coefficients (lowest power first) and the largest error over a dense float32 grid of
x, in ulp of the float32 result, with the engine's float32 evaluation order (no fused
multiply-adds, as the baseline loops; the AVX2 and AVX-512 loops may fuse them).

    python engines/onednn/fit_log.py    # needs numpy
"""
import numpy as np

DEGREE = 7
LO, HI = np.sqrt(0.5) - 1, np.sqrt(2.0) - 1
F = np.concatenate([np.linspace(LO, -1e-4, 6001), np.linspace(1e-4, HI, 6001)])
LN2_HI, LN2_LO = np.float32(0.693359375), np.float32(-2.12194440e-4)


def fit(iters=300):
    target = (np.log1p(F) - F + F * F / 2) / F ** 3
    basis = np.stack([F ** k for k in range(DEGREE + 1)], 1)
    lawson, best = np.ones_like(F), None
    for _ in range(iters):
        w = lawson * np.abs(F ** 3 / np.log1p(F))  # weight by the relative error of log1p
        coef, *_ = np.linalg.lstsq(basis * w[:, None], target * w, rcond=None)
        err = np.abs(F ** 3 * (basis @ coef - target)) / np.abs(np.log1p(F))
        if best is None or err.max() < best[1]:
            best = (coef, float(err.max()))
        lawson = lawson * np.sqrt(err / err.max()) + 1e-15
        lawson /= lawson.max()
    return best


def log_float32(p, x):
    """vmath::log's arithmetic in float32, for positive normal x."""
    bits = x.view(np.uint32)
    e = (bits >> 23).astype(np.int32) - 127
    m = ((bits & 0x7FFFFF) | 0x3F800000).view(np.float32)
    big = m > np.float32(1.41421356)
    m = np.where(big, m * np.float32(0.5), m)
    e = e + big
    f = m - np.float32(1)
    acc = np.full(f.shape, p[-1], np.float32)
    for c in p[-2::-1]:
        acc = acc * f + np.float32(c)
    ef = e.astype(np.float32)
    ff = f * f
    r = (ff * f * acc + ef * LN2_LO) - np.float32(0.5) * ff + f
    return r + ef * LN2_HI


def float32_error(p):
    x = np.concatenate([np.linspace(0.25, 4, 4_000_001, dtype=np.float32),
                        np.float32(2.0) ** np.arange(-125, 127, dtype=np.float32),
                        np.geomspace(1.2e-38, 3e38, 2_000_001).astype(np.float32)])
    got = log_float32(p.astype(np.float32), x).astype(np.float64)
    want = np.log(x.astype(np.float64))
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return float((np.abs(got - want) / ulp).max())


if __name__ == "__main__":
    coef, err = fit()
    print("P (f^0 first):", ", ".join(f"{float(np.float32(c)):.8e}" for c in coef))
    print(f"largest relative error of log1p: {err:.2g} in double; "
          f"log in float32: {float32_error(coef):.2f} ulp")
