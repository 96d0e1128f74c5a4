"""The polynomial behind ``tc_log1p_unit`` (tricomb/scalar/builtins.py): log1p(t) = t * p(t) on [0, 1].

p interpolates log1p(t) / t at the Chebyshev nodes of [0, 1] (near-minimax: the error of interpolation at
Chebyshev nodes is within a small factor of the best polynomial's; L. N. Trefethen, *Approximation Theory and
Approximation Practice*, SIAM 2013, chapters 8 and 16). The coefficients are rounded to float32 and the
result is checked the way the kernel computes it: float32 Horner steps, against float64's log1p of the float32
argument, on 2^21 points of [0, 1]. Prints, per degree, the largest error in ulp and the coefficients (lowest
power first). Degree 9 is the lowest within 2 ulp.

    python bench/experiments/log1p_fit.py
"""
import numpy as np
from numpy.polynomial import chebyshev, polynomial


def log1p_over_t(t: np.ndarray) -> np.ndarray:
    out = np.ones_like(t)
    nonzero = t != 0
    out[nonzero] = np.log1p(t[nonzero]) / t[nonzero]
    return out


def fit(degree: int) -> np.ndarray:
    """float32 coefficients of p in powers of t, lowest first."""
    k = np.arange(degree + 1)
    nodes = np.cos((2 * k + 1) * np.pi / (2 * degree + 2))  # Chebyshev points of the first kind on [-1, 1]
    in_u = chebyshev.cheb2poly(chebyshev.chebfit(nodes, log1p_over_t((nodes + 1) / 2), degree))
    in_t = polynomial.Polynomial(in_u)(polynomial.Polynomial([-1.0, 2.0]))  # u = 2t - 1
    return in_t.coef.astype(np.float32)


def ulp_error(coef: np.ndarray, t: np.ndarray) -> float:
    p = np.full_like(t, coef[-1])
    for c in coef[-2::-1]:
        p = p * t + c  # float32 throughout, as the kernel (an FMA rounds once: at most as far off)
    got = (t * p).astype(np.float64)
    want = np.log1p(t.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    return float(np.max(np.abs(got - want) / ulp))


def main() -> None:
    t = np.linspace(0.0, 1.0, 2**21 + 1).astype(np.float32)
    for degree in range(7, 12):
        coef = fit(degree)
        print(f"degree {degree}: {ulp_error(coef, t):.2f} ulp;", ", ".join(repr(np.float32(c)) for c in coef))


if __name__ == "__main__":
    main()
