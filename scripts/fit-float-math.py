#!/usr/bin/env python3
"""Fits the polynomial coefficients of exec/float_math.h (float32 exp and erf that vectorize) and
prints them as C++ float literals. Near-minimax: least squares on Chebyshev nodes, in float64.

    python3 scripts/fit-float-math.py

exp:  e^r on |r| <= ln2 / 2, degree 6, in r.
erf:  x P(x^2) / Q(x^2) on |x| <= 4, P of degree 6, Q of degree 5 (beyond 4, erf is 1 in float32).
tanh: x + x^3 P(x^2) on |x| < 0.625, P of degree 4 (beyond, the header uses 1 - 2 / (e^2|x| + 1)).
The erf and tanh fits are relative to the function; their float64 errors are printed.
The header's test checks the float32 results against double-precision exp / erf over a sweep.
"""
import math

import numpy as np
from numpy.polynomial import chebyshev as cheb


def fit(f, lo, hi, deg, n=4000):
    """Coefficients (lowest first) of a degree-deg polynomial in t in [-1, 1], x = lo + (hi - lo)(t + 1) / 2."""
    t = np.cos(np.pi * (np.arange(n) + 0.5) / n)
    x = lo + (hi - lo) * (t + 1) / 2
    return cheb.cheb2poly(cheb.chebfit(t, f(x), deg))


def show(name, coeffs, err):
    print(f"// {name}: max relative error of the float64 fit {err:.2e}")
    print("{" + ", ".join(f"{np.float32(c)!r}f".replace("np.float32(", "").replace(")", "") for c in coeffs) + "}")


half_ln2 = math.log(2) / 2
p = fit(np.exp, -half_ln2, half_ln2, 6)
p_r = p / half_ln2 ** np.arange(len(p))  # in r instead of t = r / (ln2 / 2)
r = np.linspace(-half_ln2, half_ln2, 200001)
show("exp, in r", p_r, np.max(np.abs(np.polynomial.polynomial.polyval(r, p_r) / np.exp(r) - 1)))

erf = np.vectorize(math.erf)
# erf(x) ~ x P(t) / Q(t), t = x^2, Q(0) = 1: linearized least squares x P(t) - erf(x) Q(t) = 0,
# divided by the previous Q (Loeb), relative to erf, with weights grown where the error is largest
# (Lawson), which drives the fit toward minimax.
n = 6000
x = np.concatenate([4 * (np.cos(np.pi * (np.arange(n) + 0.5) / n) + 1) / 2, np.linspace(0, 4, n)])
t, f = x * x, erf(x)
q_prev, w = np.ones_like(x), np.ones_like(x)
for _ in range(30):
    powers_p = t[:, None] ** np.arange(7)
    powers_q = t[:, None] ** np.arange(1, 6)
    a = np.hstack([x[:, None] * powers_p, -f[:, None] * powers_q]) / q_prev[:, None]
    scale = w / np.maximum(f, 1e-30)
    sol = np.linalg.lstsq(a * scale[:, None], f / q_prev * scale, rcond=None)[0]
    p, q = sol[:7], np.concatenate([[1.0], sol[7:]])
    q_prev = np.polynomial.polynomial.polyval(t, q)
    err = np.abs(x * np.polynomial.polynomial.polyval(t, p) / q_prev - f) / np.maximum(f, 1e-30)
    w = w * (1 + err / err.max())
show("erf P, in t = x^2", p, err.max())
show("erf Q, in t = x^2", q, err.max())

# tanh(x) ~ x + x t P(t), t = x^2, on 0 < x < 0.625: least squares on (tanh(x) - x) relative to
# tanh, Lawson-weighted as above.
c = 0.625
x = np.concatenate([c * (np.cos(np.pi * (np.arange(n) + 0.5) / n) + 1) / 2, np.linspace(1e-4, c, n)])
x = x[x >= 1e-4]
t, f = x * x, np.tanh(x)
w = np.ones_like(x)
for _ in range(40):
    a = (x * t)[:, None] * t[:, None] ** np.arange(5)
    scale = w / f
    p = np.linalg.lstsq(a * scale[:, None], (f - x) * scale, rcond=None)[0]
    err = np.abs(x + x * t * np.polynomial.polynomial.polyval(t, p) - f) / f
    w = w * (1 + err / err.max())
show("tanh P, in t = x^2", p, err.max())
